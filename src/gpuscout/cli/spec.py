"""`gpuscout spec [KIND]`: every job-spec field with its type, default, range and meaning (docs/spec.md)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from gpuscout.cli.options import JsonFlag


def spec(
    kind: Annotated[str | None, typer.Argument(metavar="[KIND]", help="finetune, inference, image or video; "
                                               "default: every kind.")] = None,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print docs/spec.md (Markdown tables).")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Every job-spec field: type, default, range and meaning, read from the job models themselves."""
    from gpuscout.api.spec import job_spec
    from gpuscout.cli.output import print_json
    from gpuscout.report.escape import printable
    from gpuscout.report.spec import spec_markdown, spec_payload, spec_text

    tables = job_spec(kind)
    if as_json:
        print_json(spec_payload(tables))
    else:
        sys.stdout.write(printable(spec_markdown(tables) if markdown else spec_text(tables)))
