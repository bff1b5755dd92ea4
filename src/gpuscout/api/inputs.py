"""The inputs several journeys share: the output path checked up front, an offer from its price sheet,
exchange rates, result files, the calibration, and the error that names an input without naming a flag.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING

from gpuscout.errors import SpecError

if TYPE_CHECKING:
    from gpuscout.estimator.calibration import Calibration
    from gpuscout.hardware.currency import ExchangeRate
    from gpuscout.hardware.offers import Offer
    from gpuscout.hardware.price_sheet import PriceSheet
    from gpuscout.results.schema import BenchResult


class InputError(SpecError):
    """A mistake in an api call's inputs, its parts naming each input as `{field}` (values as keywords).

    A Python caller reads the parameter's name (`target_rps 0 is not a positive rate.`); the command
    line words the same error with its flags (`named`), so the api holds no flag names.
    """

    def __init__(self, what: str, why: str, fix: str, **values: object) -> None:
        self.parts = (what, why, fix)
        self.values = values
        super().__init__(*self._worded(str))

    def named(self, name: Callable[[str], str]) -> SpecError:
        """The same error with each input named by `name` (the command line passes its flag names)."""
        return SpecError(*self._worded(name))

    def _worded(self, name: Callable[[str], str]) -> tuple[str, str, str]:
        names = _Names(name, self.values)
        what, why, fix = (part.format_map(names) for part in self.parts)
        return what, why, fix


class _Names(dict[str, object]):
    """The values given, and every other `{field}` named by the caller's rule."""

    def __init__(self, name: Callable[[str], str], values: dict[str, object]) -> None:
        super().__init__(values)
        self.name = name

    def __missing__(self, field: str) -> str:
        return self.name(field)


def checked_output(output: str | Path | None, what: str) -> Path | None:
    """The output path, refused before any work starts when it cannot be written (docs/design.md §4.10)."""
    if output is None:
        return None
    from gpuscout.outfile import check_output_path

    return check_output_path(Path(output), what)


def offer_in(offers: str | Path | None, offer_id: str | None) -> tuple[PriceSheet, Offer]:
    """The price sheet and the offer picked from it by id; both must be given."""
    from gpuscout.hardware.price_sheet import find_offer, load_price_sheet

    if offers is None or offer_id is None:
        raise InputError("{offers} and {offer} go together.", "An offer is picked by its id from a price sheet.",
                         "Pass both, e.g. {offers} prices.toml {offer} <id> (`gpuscout examples` shows a sheet).")
    sheet = load_price_sheet(Path(offers))
    return sheet, find_offer(sheet, offer_id)


def rates_for(sheet: Sequence[ExchangeRate], fx: Sequence[str | ExchangeRate], today: date,
              ) -> tuple[ExchangeRate, ...]:
    """The sheet's exchange rates, with the rates given (`CNY=0.14` or parsed) taking precedence."""
    from gpuscout.hardware.currency import merge_rates, parse_fx

    return merge_rates(sheet, [parse_fx(r, today) if isinstance(r, str) else r for r in fx])


def results_of(results: Sequence[str | Path | BenchResult]) -> list[BenchResult]:
    """Each given result as it is, or read from its file."""
    from gpuscout.results.schema import BenchResult
    from gpuscout.results.store import load_result

    return [r if isinstance(r, BenchResult) else load_result(Path(r)) for r in results]


def calibration_of(given: Calibration | str | Path | None, use: bool) -> tuple[Calibration | None, Path | None]:
    """The calibration to use and its file: the one given, else the user's file where it exists."""
    from gpuscout.estimator.calibration import Calibration, active_calibration

    if isinstance(given, Calibration):
        return (given if use else None), None
    active = active_calibration(Path(given) if given is not None else None, use=use)
    return active.calibration, active.path
