"""`gpuscout report FILE_OR_ID… -o report.html`: gpuscout's outputs drawn in one self-contained HTML file."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpuscout.cli.results import StoreOption
from gpuscout.cli.stdio import stdio
from gpuscout.report.escape import screen_console

if TYPE_CHECKING:
    from gpuscout.workload.job import Slo


def report(
    sources: Annotated[list[str], typer.Argument(
        metavar="FILE_OR_ID...", help="Outputs of gpuscout: estimate/pick --json, compare --format json, bench or "
                                      "load results, or ids of stored runs (`gpuscout results list`).")],
    output: Annotated[Path, typer.Option("--output", "-o", help="The HTML file to write (- for stdout).")],
    title: Annotated[str, typer.Option(help="The page's title.")] = "gpuscout report",
    ttft_p95: Annotated[float | None, typer.Option(help="SLO line on load sweeps: P95 TTFT, s.")] = None,
    tpot_p95: Annotated[float | None, typer.Option(help="SLO line on load sweeps: P95 TPOT, s.")] = None,
    store: StoreOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print what was written as JSON.")] = False,
) -> None:
    """Draw results as one HTML file that opens offline: no script, no font file, nothing fetched.

    Estimates draw memory per term against each GPU's memory; picks, cost against time with the
    Pareto frontier; comparisons, each ratio's 95% CI; bench and load results, their distributions
    (all results on the same axes) and, for sweeps, latency against throughput with the SLO lines.
    """
    from gpuscout import api
    from gpuscout.errors import SpecError
    from gpuscout.host import package_version
    from gpuscout.outfile import check_output_path, write_atomic
    from gpuscout.report.html.page import render_report

    with stdio() as io:  # `-`: a source from stdin; `-o -` writes the page to stdout
        path = check_output_path(io.output(output, "report.html") or output, "report")
        inputs = api.report_inputs(io.read_all(sources, ".json", "a source"), store=store)
        slo = _slo(ttft_p95, tpot_p95)
        start = time.perf_counter()
        rendered = render_report(inputs.documents, title=title, slo=slo, version=package_version("gpuscout") or "")
        render_s = time.perf_counter() - start
        write_atomic(path, rendered.html, what="report")
        if io.to_stdout:
            if as_json:
                raise SpecError("--json and -o - both write to standard output.", "Standard output can hold one "
                                "document.", "Drop --json, or write the report to a file.")
            return
    size = len(rendered.html.encode())
    if as_json:
        sys.stdout.write(json.dumps({"output": str(path), "bytes": size, "plots": rendered.plots,
                                     "render_s": round(render_s, 3), "sections": [t for _, t in rendered.sections],
                                     "sources": [d.label for d in inputs.documents]}, indent=2) + "\n")
        return
    screen_console().print(f"report written to {path}: {len(inputs.documents)} source(s), {rendered.plots} plot(s), "
                    f"{size / 1024:,.0f} KiB, drawn in {render_s:.2f} s", markup=False, highlight=False)


def _slo(ttft_p95: float | None, tpot_p95: float | None) -> Slo | None:
    import math

    from gpuscout.errors import SpecError
    from gpuscout.workload.job import Slo

    for flag, value in (("--ttft-p95", ttft_p95), ("--tpot-p95", tpot_p95)):
        if value is not None and not (math.isfinite(value) and 0 < value <= 1e6):
            raise SpecError(f"{flag} {value} is not a target time.", "An SLO target is a P95 latency in seconds.",
                            f"Pass {flag} as seconds above zero, e.g. {flag} 0.5.")
    return Slo(ttft_p95_s=ttft_p95, tpot_p95_s=tpot_p95) if ttft_p95 or tpot_p95 else None
