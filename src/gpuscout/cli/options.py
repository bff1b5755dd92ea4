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
