"""`gpuscout results list`: the stored runs, one line each, as plain aligned text.

Plain text rather than a rich table: a store holds thousands of runs, and a line per run reads
like `git log --oneline` and greps well; laying out 1,000 rows as a rich table took 0.76 s here,
these lines take milliseconds (benchmarks/results_list.py). A terminal too narrow for every field
whole (80 columns) gets two lines per run: what and when on the first, the machine and the summary
under it. A field is cut with '…' only past its line; `results show ID` has the whole run.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gpuscout.results.database import StoredRun

HEADER = ("id", "made (UTC)", "kind", "job", "machine", "summary")
_GAP = "  "


def results_text(runs: Sequence[StoredRun], matched: int, store: Path, *, width: int = 80) -> str:
    """The header, one line per run (oldest first), and a note when older runs were left out."""
    if not matched:
        return (f"No stored runs match in {store}.\n" if store.exists() else
                f"No results store yet at {store}.\nbench, load, doctor and pick record their runs there.\n")
    rows = [(str(r.id), r.created_at.strftime("%Y-%m-%d %H:%M"), _kind(r), r.job, r.machine, r.summary) for r in runs]
    if _natural_width(rows) > width:
        return _two_line_text(rows, matched, len(runs), store, width)
    widths = _widths(rows, width)
    lines = [f"{matched:,} stored run(s) in {store}", _line(HEADER, widths), *(_line(r, widths) for r in rows)]
    if matched > len(runs):
        lines.append(f"… {matched - len(runs):,} older run(s) not shown (--limit 0 shows all).")
    return "\n".join(lines) + "\n"


def _natural_width(rows: Sequence[tuple[str, ...]]) -> int:
    return sum(max(len(r[i]) for r in (*rows, HEADER)) for i in range(len(HEADER))) + len(_GAP) * (len(HEADER) - 1)


def _two_line_text(rows: Sequence[tuple[str, ...]], matched: int, shown: int, store: Path, width: int) -> str:
    """A terminal too narrow for every field whole (80 columns): each run on two lines, as pick's default
    screen shows an offer. The id, when, kind and job on the first; the machine and the summary (the
    verdict: keep or return, valid levels, the offer a trial names) indented under them. A field is cut
    with '…' only when its line has no room for it."""
    fixed = [max(len(r[i]) for r in (*rows, HEADER)) for i in range(3)]
    first = [*fixed, max(10, width - sum(fixed) - len(_GAP) * 3)]
    indent = " " * (fixed[0] + len(_GAP))
    room = width - len(indent) - len(_GAP)
    summary = min(max(len(r[5]) for r in (*rows, HEADER)), room // 2)  # the verdict whole, up to half the line
    machine = min(max(len(r[4]) for r in (*rows, HEADER)), max(10, room - summary))
    second = [machine, max(10, room - machine)]

    def under(cells: Sequence[str]) -> str:
        return (indent + _GAP.join(_fit(c, w).ljust(w) for c, w in zip(cells, second, strict=True))).rstrip()

    lines = [f"{matched:,} stored run(s) in {store}", _line(HEADER[:4], first), under(HEADER[4:])]
    for r in rows:
        lines += [_line(r[:4], first), under(r[4:])]
    if matched > shown:
        lines.append(f"… {matched - shown:,} older run(s) not shown (--limit 0 shows all).")
    return "\n".join(lines) + "\n"


def _kind(r: StoredRun) -> str:
    return r.kind if not r.result_kind or r.result_kind == r.kind else f"{r.kind} {r.result_kind}"


def _widths(rows: Sequence[tuple[str, ...]], width: int) -> list[int]:
    """id, time and kind whole; job, machine and summary share what is left (at least 10 each)."""
    fixed = [max(len(r[i]) for r in (*rows, HEADER)) for i in range(3)]
    natural = [max(len(r[i]) for r in (*rows, HEADER)) for i in range(3, 6)]
    room = max(30, width - sum(fixed) - len(_GAP) * 5)
    if sum(natural) <= room:
        return fixed + natural
    shares = (0.3, 0.3, 0.4)
    cut = [max(10, min(n, int(room * s))) for n, s in zip(natural, shares, strict=True)]
    cut[2] = max(10, room - cut[0] - cut[1])
    return fixed + cut


def _line(cells: Sequence[str], widths: Sequence[int]) -> str:
    fitted = [_fit(c, w) for c, w in zip(cells, widths, strict=True)]
    return _GAP.join([fitted[0].rjust(widths[0]), *(f.ljust(w) for f, w in zip(fitted[1:], widths[1:],
                                                                             strict=True))]).rstrip()


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
