"""The error tree. A user error says what happened, why, and how to fix it.

User errors (subclasses of `GpuscoutError`) are printed without a traceback and exit 1;
anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError


class GpuscoutError(Exception):
    """A mistake in the user's input or environment, explained in three parts."""

    def __init__(self, what: str, why: str, fix: str) -> None:
        self.what = what
        self.why = why
        self.fix = fix
        super().__init__(self.render())

    def render(self) -> str:
        return f"{self.what}\n  Why: {self.why}\n  To fix: {self.fix}"


class UnknownNameError(GpuscoutError):
    """A GPU, model or preset name that is not in the catalog."""


class SpecError(GpuscoutError):
    """A job spec, config or price sheet that cannot be read or is invalid."""


class MissingDependencyError(GpuscoutError):
    """An optional dependency (torch, transformers, …) that a command needs is not installed."""


class UnsupportedHere(Exception):
    """This case cannot run on this machine (e.g. QLoRA on a CPU); a bench records it as `unsupported`."""


def option_error(exc: ValidationError, why: str, fix: str) -> SpecError:
    """The first invalid command-line option in `exc`, named as its flag (`min_effect` → `--min-effect`).

    `fix` may say `{flag}` where the flag's name belongs.
    """
    first = exc.errors()[0]
    flag = "--" + str(first["loc"][0]).replace("_", "-") if first["loc"] else "an option"
    return SpecError(f"{flag} {first.get('input')!r}: {first['msg']}.", why, fix.format(flag=flag))
