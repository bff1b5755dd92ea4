"""What `load` writes beside its result: per-level costs, the search verdict, the SLO it was judged against.

One function builds it for the results store, `--json` and the `-o` file alike, so a file given to
`gpuscout report` draws the same cost table and SLO lines as the stored run does; `documents.read`
reads it back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from gpuscout.cost.load_cost import LoadCost
from gpuscout.results.schema import Case
from gpuscout.workload.job import Slo


class SearchVerdict(Protocol):
    """What a load search concluded (`loadgen.search.SearchResult` has these, and more)."""

    @property
    def best_level(self) -> int | float | None: ...
    @property
    def goodput_rps(self) -> float | None: ...
    @property
    def outcome(self) -> str: ...
    @property
    def message(self) -> str: ...


def load_beside(cases: Sequence[Case], costs: Sequence[LoadCost], search: SearchVerdict | None,
                slo: Slo | None) -> dict[str, Any]:
    """The keys written beside a load result: "slo", "costs" (one per case, named), "search"; absent ones left out."""
    out: dict[str, Any] = {}
    if slo is not None:
        out["slo"] = slo.model_dump()
    if costs:
        out["costs"] = [{"case": case.name, **cost.model_dump()} for case, cost in zip(cases, costs, strict=True)]
    if search is not None:
        out["search"] = {"best_level": search.best_level, "goodput_rps": search.goodput_rps,
                         "outcome": search.outcome, "message": search.message}
    return out
