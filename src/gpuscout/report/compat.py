"""The compatibility findings in words (`estimator/compat.py`): one line each, for footnotes and notes.

"Cannot run" findings say the fix and what it costs by the speed model; "runs slower" findings say
the fallback that was priced; "runs if" findings say the condition. A finding names no GPU, so a
screen prints it once for every GPU it applies to.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import RenderableType
from rich.text import Text

from gpuscout.cost.pick_row import PickRow
from gpuscout.estimator.compat import Finding, change_pct, spec_edits
from gpuscout.report.layout import some_ids
from gpuscout.report.numbers import duration


def finding_text(f: Finding, *, fix_time: bool = False) -> str:
    """One finding as one sentence. `fix_time`: where the job as written has no time to compare the
    fix with, give the job time under the fix (it differs per GPU, so tables leave it out)."""
    match f.outcome:
        case "excluded":
            cost = f": {change_pct(f.slowdown)} time" if f.slowdown is not None else ""
            if f.slowdown is None and fix_time and f.fix_job_s is not None:
                cost = f": job time then {duration(f.fix_job_s)}"
            return f"Cannot run: {f.reason}. Fix: {spec_edits(f.fix_change)}, {f.fix}{cost}"
        case "fallback":
            cost = f" ({change_pct(f.slowdown)} time)" if f.slowdown is not None else ""
            return f"Runs slower: {f.reason}; {f.fallback}{cost}"
        case _:
            return f"Runs if: {f.reason}; {f.fallback}"


def short_words(findings: Sequence[Finding]) -> str:
    """The findings of a priced row in a few words: 'no P2P +18%'."""
    words = {"no-peer-to-peer": "no P2P", "fp8-weight-only": "fp8 weight-only", "bitsandbytes-rocm": "bnb ROCm"}
    return ", ".join(words.get(f.rule, f.rule) + (f" {change_pct(f.slowdown)}" if f.slowdown else "")
                     for f in findings)


def compat_lines(rows: Sequence[PickRow]) -> list[RenderableType]:
    """Under a ranking: each finding of the ranked rows once, with the offers it concerns ('!' marks them)."""
    by_text: dict[str, list[str]] = {}
    for row in rows:
        for f in row.compat:
            by_text.setdefault(finding_text(f), []).append(row.offer_id)
    return [Text(f"! {text}: {some_ids(ids)}", style="yellow") for text, ids in by_text.items()]


def compat_detail(findings: Sequence[Finding]) -> list[RenderableType]:
    """Under one GPU's detail: each finding that lets the job run, and the job time with the fixes of
    those that do not (their reason is the speed note: 'No job time: …')."""
    out: list[RenderableType] = [Text(f"Compatibility: {finding_text(f)}", style="yellow")
                                 for f in findings if f.outcome != "excluded"]
    fixed = next((f.fix_job_s for f in findings if f.outcome == "excluded" and f.fix_job_s is not None), None)
    if fixed is not None:
        edits = ", ".join(spec_edits(f.fix_change) for f in findings if f.outcome == "excluded")
        out.append(Text(f"Compatibility: with {edits}, the job time would be {duration(fixed)}.", style="yellow"))
    return out
