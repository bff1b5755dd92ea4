"""The compatibility findings in words (`estimator/compat.py`): one line each, for footnotes and notes.

"Cannot run" findings say the fix and what it costs by the speed model; "runs slower" findings say
the fallback that was priced; "runs if" findings say the condition. A finding names no GPU, so a
screen prints it once for every GPU it applies to.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich.console import RenderableType
from rich.text import Text

from gpuscout.cost.pick_row import PickRow
from gpuscout.estimator.compat import Finding, change_pct, spec_edits
from gpuscout.report.layout import some_ids
from gpuscout.report.numbers import duration

Span = tuple[float, float]  # the least and the most slowdown of one finding over the GPUs of a screen


def finding_text(f: Finding, *, span: Span | None = None) -> str:
    """One finding as one sentence. `span`: the finding's slowdown over every GPU it applies to on the
    screen, so that one footnote serves them all ('+2% to +4% time')."""
    low, high = span if span is not None else (f.slowdown, f.slowdown)
    if low is None or high is None:
        cost = ""
    elif change_pct(low) == change_pct(high):
        cost = f"{change_pct(low)} time"
    else:
        cost = f"{change_pct(low)} to {change_pct(high)} time"
    match f.outcome:
        case "excluded":
            return f"Cannot run: {f.reason}. Fix: {spec_edits(f.fix_change)}, {f.fix}" + (f": {cost}" if cost else "")
        case "fallback":
            return f"Runs slower: {f.reason}; {f.fallback}" + (f" ({cost})" if cost else "")
        case _:
            return f"Runs if: {f.reason}; {f.fallback}"


def spans(findings: Iterable[Finding]) -> dict[tuple[str, str], Span]:
    """Per (rule, reason): the least and the most slowdown among `findings` that have one."""
    out: dict[tuple[str, str], Span] = {}
    for f in findings:
        if f.slowdown is not None:
            low, high = out.get((f.rule, f.reason), (f.slowdown, f.slowdown))
            out[(f.rule, f.reason)] = (min(low, f.slowdown), max(high, f.slowdown))
    return out


def short_words(findings: Sequence[Finding]) -> str:
    """The findings of a priced row in a few words: 'no P2P +18%'."""
    words = {"no-peer-to-peer": "no P2P", "fp8-weight-only": "fp8 weight-only", "bitsandbytes-rocm": "bnb ROCm"}
    return ", ".join(words.get(f.rule, f.rule) + (f" {change_pct(f.slowdown)}" if f.slowdown else "")
                     for f in findings)


def compat_lines(rows: Sequence[PickRow]) -> list[RenderableType]:
    """Under a ranking: each finding of the ranked rows once, with the offers it concerns ('!' marks them)."""
    by_text: dict[str, list[str]] = {}
    ranges = spans(f for row in rows for f in row.compat)  # each row's own figure is beside its '!'
    for row in rows:
        for f in row.compat:
            by_text.setdefault(finding_text(f, span=ranges.get((f.rule, f.reason))), []).append(row.offer_id)
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
