"""The options several commands share, declared once (typer reads the help from these annotations)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

JsonFlag = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of tables.")]
WideFlag = Annotated[bool, typer.Option("--wide", help="Every column, however wide the terminal.")]
RunsOption = Annotated[int, typer.Option(help="Independent runs of every case, interleaved (fresh processes).")]
RegionOption = Annotated[str | None, typer.Option(help="Region the machine was rented in (a fixed variable).")]
BillingOption = Annotated[str | None, typer.Option(help="Billing type: on-demand, spot, reserved … (fixed).")]
OutputOption = Annotated[Path | None, typer.Option("--output", "-o", help="Write the result JSON here (- for stdout).")]
CalibrationOption = Annotated[Path | None, typer.Option(
    "--calibration", help="Calibration file (gpuscout calibrate); default: the one in your config folder, if any.")]
NoCalibrationFlag = Annotated[bool, typer.Option(
    "--no-calibration", help="Ignore any calibration: the default efficiency factors.")]


def one_calibration_choice(calibration: Path | None, no_calibration: bool) -> None:
    if calibration is not None and no_calibration:
        from gpuscout.errors import SpecError

        raise SpecError("--calibration and --no-calibration were both given.",
                        "One says which calibration to use, the other to use none.", "Pass one of them.")
