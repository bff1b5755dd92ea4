"""What a command prints: the JSON payload or the rendered screen, and a user error worded with flags.

Every command module prints through here (app, load, doctor, results), so none imports another
command's module for it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

from rich.console import Console

from gpuscout.errors import GpuscoutError
from gpuscout.report.escape import screen_console

# The flags whose names are not the api parameter's with dashes (`target_rps` → `--target-rps`).
FLAG_OF = {"load_results": "--load", "doctor_results": "--doctor", "offer_ids": "--offer", "ssh_targets": "--ssh",
           "source": "--from"}


def emit(payload: Callable[[], Any], renderable: Callable[[], Any], as_json: bool) -> None:
    """Print the JSON payload or the rendered screen; only the one asked for is built."""
    if as_json:
        print_json(payload())
    else:
        console().print(renderable())


def console() -> Console:
    """The console of every screen: outside text on it shows its control characters escaped (report.escape)."""
    return screen_console()


def print_json(payload: Any) -> None:
    # allow_nan=False: NaN and Infinity are not JSON; inputs are checked so that none reaches here.
    sys.stdout.write(json.dumps(payload, indent=2, default=str, allow_nan=False) + "\n")


def flag(field: str) -> str:
    """The command-line flag of an api parameter."""
    return FLAG_OF.get(field, "--" + field.replace("_", "-"))


def worded(exc: GpuscoutError) -> GpuscoutError:
    """The error as the command line says it: an api input error names its inputs by their flags."""
    from gpuscout.api.inputs import InputError

    return exc.named(flag) if isinstance(exc, InputError) else exc
