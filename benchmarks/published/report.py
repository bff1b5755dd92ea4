"""Errors, per-category statistics and the markdown of the published-error benchmark."""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from published.peers import PeerResult
from published.points import CATEGORIES, Point, is_memory, quantity_unit

# The targets this round holds gpuscout to (median |error| of the certain points, except max_seq_len).
TARGETS: dict[str, tuple[float, str]] = {
    "weights": (0.01, "median \\|err\\| ≤ 1%"),
    "kv_capacity": (0.05, "median \\|err\\| ≤ 5%"),
    "training_peak": (0.10, "median \\|err\\| ≤ 10%"),
    "inference_peak": (0.25, "median \\|err\\| ≤ 25%"),
    "image_peak": (0.06, "median \\|err\\| ≤ 6%"),
    "video_peak": (0.06, "median \\|err\\| ≤ 6%"),
    "speed": (0.20, "median \\|err\\| ≤ 20% (uncalibrated)"),
    "max_seq_len": (0.10, "never > 10% above what trained"),
}
CALIBRATED = "speed, calibrated (leave-one-out)"
CALIBRATED_TARGET = 0.10  # median |error| after one calibration run on the same GPU


def error(estimate: float | None, measured: float) -> float | None:
    """Signed relative error: estimate / measured − 1 (−0.1 = the estimate is 10% low)."""
    return None if estimate is None else estimate / measured - 1.0


def unsafe(category: str, err: float, beyond: float = 0.0) -> bool:
    """The direction that costs the user: memory or KV estimated low, a longest sequence estimated high;
    `beyond` = by more than that fraction (0.05: the 'unsafe > 5%' share)."""
    if category in ("max_seq_len", "kv_capacity"):
        return err > beyond
    return err < -beyond and category != "speed"


UNSAFE_BEYOND = 0.05  # the unsafe share counts points off on the unsafe side by more than this
UNSAFE_TARGET = 0.10  # at most 1 in 10 memory points more than 5% under (sources used in no constant)


@dataclass
class Row:
    point: Point
    after: dict[str, Any]  # gpuscout_side result: status, value, detail
    before: dict[str, Any] | None = None
    peers: dict[str, PeerResult] = field(default_factory=dict)
    calibrated: float | None = None  # leave-one-out calibrated speed estimate, where available
    loso: float | None = None  # the estimate under constants fitted without this point's source (loso.py)
    loso_note: str = ""  # why there is no LOSO estimate, where there is none

    @property
    def inexpressible(self) -> str | None:
        """Why the point is left out: the job does not parse, or its author says gpuscout cannot express it."""
        if self.after["status"] == "inexpressible":
            return str(self.after["detail"])
        return self.point.inexpressible_note

    @property
    def in_sample(self) -> bool:
        """A gpuscout constant was set from this point, so its error is no test of that constant."""
        return bool(self.point.extra.get("informs"))

    @property
    def counted(self) -> bool:
        """In the headline: certain, expressible and estimated."""
        return self.point.certain and self.inexpressible is None and self.after["status"] == "ok"

    def err(self, which: str = "after") -> float | None:
        if which == "loso":
            return error(self.loso, self.point.measured)
        result = self.after if which == "after" else self.before
        if not result or result.get("status") != "ok":
            return None
        return error(result["value"], self.point.measured)

    def peer_err(self, peer: str) -> float | None:
        result = self.peers.get(peer)
        return None if result is None else error(result.value, self.point.measured)


@dataclass(frozen=True)
class Stats:
    count: int
    median_abs: float | None
    worst: float | None  # signed error of largest magnitude (max_seq_len: the largest, i.e. most above)
    unsafe_share: float | None  # share on the unsafe side, by any amount
    unsafe5_share: float | None = None  # share on the unsafe side by more than UNSAFE_BEYOND


def stats(category: str, errors: Sequence[float]) -> Stats:
    if not errors:
        return Stats(0, None, None, None)
    worst = max(errors) if category == "max_seq_len" else max(errors, key=abs)
    share = sum(unsafe(category, e) for e in errors) / len(errors)
    beyond = sum(unsafe(category, e, UNSAFE_BEYOND) for e in errors) / len(errors)
    return Stats(len(errors), statistics.median(abs(e) for e in errors), worst, share,
                 None if category == "speed" else beyond)


def memory_errors(rows: Sequence[Row], which: str = "after", sources: set[str] | None = None,
                  exclude: bool = False) -> list[tuple[str, float]]:
    """(category, error) of every counted memory point (a memory quantity, GiB / GB / MiB); with
    `sources`, only the points of those sources (`exclude`: all but those)."""
    from published.loso import source_key

    found = []
    for r in rows:
        if not (r.counted and is_memory(r.point.quantity)):
            continue
        if sources is not None and (source_key(r.point.source) in sources) == exclude:
            continue
        e = r.err(which)
        if e is not None:
            found.append((r.point.category, e))
    return found


def unsafe5(pairs: Sequence[tuple[str, float]]) -> float | None:
    """Share of (category, error) pairs on the unsafe side by more than UNSAFE_BEYOND."""
    return sum(unsafe(c, e, UNSAFE_BEYOND) for c, e in pairs) / len(pairs) if pairs else None


def category_errors(rows: Sequence[Row], category: str, which: str = "after", held_out: bool = False,
                    sources: set[str] | None = None) -> list[float]:
    """Errors of the counted points of `category`; `held_out` leaves out the in-sample ones; with
    `sources`, only the points of those sources."""
    from published.loso import source_key

    found = (r.err(which) for r in rows if r.point.category == category and r.counted
             and not (held_out and r.in_sample)
             and (sources is None or source_key(r.point.source) in sources))
    return [e for e in found if e is not None]


def peer_errors(rows: Sequence[Row], category: str, peer: str) -> list[float]:
    found = (r.peer_err(peer) for r in rows if r.point.category == category and r.counted)
    return [e for e in found if e is not None]


def pct(value: float | None, signed: bool = True) -> str:
    if value is None:
        return "–"
    return f"{value:+.1%}" if signed else f"{value:.1%}"


def target_met(category: str, s: Stats) -> str:
    limit, _ = TARGETS[category]
    if s.count == 0 or s.median_abs is None or s.worst is None:
        return "no data"
    value = s.worst if category == "max_seq_len" else s.median_abs
    return "met" if value <= limit else "missed"


def headline(category: str, s: Stats) -> str:
    """The number a target is judged on."""
    return pct(s.worst) if category == "max_seq_len" else pct(s.median_abs, signed=False)


# ------------------------------------------------------------------------ markdown ---------------

def fmt_value(value: float | None, quantity: str) -> str:
    if value is None:
        return "–"
    if is_memory(quantity) or quantity in ("max_concurrency",):
        return f"{value:,.2f}"
    if quantity.endswith("_s") or quantity.startswith("s_per"):
        return f"{value:.3g}"
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def source_link(source: str) -> str:
    """A short markdown link: 'owner/repo#123' for an issue or PR, 'repo:file' for a file at a commit."""
    url = re.search(r"https?://\S+", source)
    if url:
        address = url.group(0).rstrip(").,")
        gh = re.match(r"https://github\.com/([^/]+)/([^/]+)/(?:issues|pull)/(\d+)", address)
        label = f"{gh.group(2)}#{gh.group(3)}" if gh else re.sub(r"^https?://(www\.)?", "", address)[:28]
        return f"[{label}]({address})"
    repo_file = re.match(r"([\w.-]+)/([\w.-]+):([^@]+)@(\S+)", source)
    if repo_file:
        owner, repo, path, ref = repo_file.groups()
        name = path.rsplit("/", 1)[-1]
        return f"[{repo}:{name[:20]}](https://github.com/{owner}/{repo}/blob/{ref}/{path})"
    return source[:40]


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _estimated(row: Row) -> str:
    """For a point its author marks inexpressible but whose job parses: what gpuscout says anyway."""
    if row.after["status"] != "ok":
        return ""
    return f" (gpuscout {fmt_value(row.after['value'], row.point.quantity)}, {pct(row.err())}; not counted)"


def summary_table(rows: Sequence[Row], baseline: bool, peers: Sequence[str], calibrated: bool) -> list[str]:
    head = ["category", "points", "median \\|err\\|", "LOSO", "held out", "worst", "LOSO worst", "unsafe (LOSO)",
            "unsafe >5% (LOSO)"]
    if baseline:
        head[2:2] = ["before"]
    head += list(peers)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for category in CATEGORIES:
        s = stats(category, category_errors(rows, category))
        loso = stats(category, category_errors(rows, category, "loso"))
        out = stats(category, category_errors(rows, category, held_out=True))
        total = sum(1 for r in rows if r.point.category == category)
        held = f"{headline(category, out)} ({out.count})" if out.count else "–"
        cells = [category, f"{s.count}/{total}", pct(s.median_abs, False), headline(category, loso) if loso.count
                 else "–", held, pct(s.worst), pct(loso.worst), pct(loso.unsafe_share, False),
                 pct(loso.unsafe5_share, False)]
        if baseline:
            cells[2:2] = [pct(stats(category, category_errors(rows, category, "before")).median_abs, False)]
        for peer in peers:
            errs = peer_errors(rows, category, peer)
            cells.append(f"{pct(stats(category, errs).median_abs, False)} ({len(errs)})" if errs else "–")
        lines.append("| " + " | ".join(cells) + " |")
        if category == "speed" and calibrated:
            found = [error(r.calibrated, r.point.measured) for r in rows if r.point.category == "speed" and r.counted]
            cal = stats("speed", [e for e in found if e is not None])
            row = [CALIBRATED, str(cal.count), pct(cal.median_abs, False), "–", "–", pct(cal.worst), "–", "–", "–"]
            if baseline:
                row[2:2] = ["–"]
            lines.append("| " + " | ".join(row + ["–"] * len(peers)) + " |")
    lines.append(memory_row(rows, baseline, peers))
    return lines


MEMORY_ROW = "all memory points"


def memory_row(rows: Sequence[Row], baseline: bool, peers: Sequence[str]) -> str:
    """The summary row over every counted memory point (GiB / GB / MiB quantities) of all categories."""
    after, loso = memory_errors(rows), memory_errors(rows, "loso")
    total = sum(1 for r in rows if is_memory(r.point.quantity))
    every = stats("memory", [e for _, e in after])
    left = stats("memory", [e for _, e in loso])
    cells = [MEMORY_ROW, f"{every.count}/{total}", pct(every.median_abs, False),
             pct(left.median_abs, False) if left.count else "–", "–", pct(every.worst), pct(left.worst),
             pct(sum(unsafe(c, e) for c, e in loso) / len(loso) if loso else None, False), pct(unsafe5(loso), False)]
    if baseline:
        before = memory_errors(rows, "before")
        cells[2:2] = [pct(stats("memory", [e for _, e in before]).median_abs, False)]
    return "| " + " | ".join(cells + ["–"] * len(peers)) + " |"


def loso_section(rows: Sequence[Row], result: Any) -> list[str]:
    """What was refitted without each source, what was not and why (published/loso.py)."""
    from published.loso import GRID_SPAN, source_key

    out = ["Each source's points are predicted with every constant it set refitted on the other sources'",
           "counted points (a source = one repository file or one issue/PR thread). The constants are",
           "found from the data: each point's `informs` field names the gpuscout constants set from it.",
           "A constant is fitted on the counted points whose estimate moves when it moves. Rule: the",
           f"value on a grid of 0 … {GRID_SPAN:g} × the committed one with the least sum of",
           "\\|estimate ÷ measured − 1\\|;",
           "constants a point responds to together are fitted together by coordinate descent. The",
           "committed constants were set by hand from those runs, so the rule's fit on every source",
           "(each constant alone) is shown too.", "",
           "| constant | set from | fitted on | committed | rule, all sources | rule, without … |",
           "|---|---|---|---|---|---|"]
    for constant in result.constants:
        every = result.every.get(constant)
        without = [f"{key}: {constant.shown(v) if v is not None else 'nothing left'}"
                   for key, v in result.without.get(constant, {}).items()]
        without += [f"{key.split(' | ')[0]} (jointly): {constant.shown(fit[constant])}"
                    for key, fit in result.joint.items() if constant in fit]
        n = result.fitted_on[constant]
        out.append(f"| `{_escape(constant.ref)}` | {'; '.join(result.informed_by[constant])} | "
                   f"{n} point{'' if n == 1 else 's'} | {constant.shown(result.committed[constant])} | "
                   f"{constant.shown(every) if every is not None else '–'} | {_escape('; '.join(without)) or '–'} |")
    if not result.constants:
        out.append("| – | no point names a constant | – | – | – | – |")
    if result.unresolved:
        out += ["", "Named by `informs` but not refittable here (their sources' points get no LOSO figure):", ""]
        out += [f"- `{_escape(ref)}` ({', '.join(result.unresolved_sources[ref])}): {_escape(why)}"
                for ref, why in result.unresolved.items()]
    if result.cited:
        out += ["", "Sources that gpuscout's own code or data cites (a constant's source; margins.toml, derived from",
                "every point, is not counted), so they are not in the \"sources used in no constant\" subset:", ""]
        out += [f"- {key}: {', '.join(files)}" for key, files in sorted(result.cited.items())]
    out += ["", "Where LOSO equals in-sample, and why:", ""]
    for category in CATEGORIES:
        counted = [r for r in rows if r.point.category == category and r.counted]
        if counted and all(r.loso == r.after.get("value") for r in counted):
            out.append(f"- {category}: no constant set from one of these points' sources acts on them, so leaving "
                       "a source out changes nothing (LOSO = in-sample).")
    out.append("- training_peak, nvidia-smi points: the 10% allocator reserve (`overhead.ALLOCATOR_FRACTION`) "
               "comes from fms-acceleration PR #14, the same project as the fms points but not one of them; "
               "it is kept as a prior, not refitted.")
    missing: dict[str, list[str]] = {}
    for r in rows:
        if r.loso_note and r.counted:
            missing.setdefault(r.loso_note, []).append(r.point.id)
    for note, ids in missing.items():
        sources = sorted({source_key(r.point.source) for r in rows if r.point.id in ids})
        out.append(f"- no LOSO figure for {len(ids)} counted point(s) of {', '.join(sources)}: {_escape(note)}.")
    used = result.used_sources()
    free = sorted(k for k, n in result.sources.items() if k not in used and n)
    out += ["", f"Sources used in no constant ({len(free)}, with counted points): " + (", ".join(free) or "none") + "."]
    return out


def targets_table(rows: Sequence[Row], result: Any = None) -> list[str]:
    lines = ["| category | target | gpuscout | verdict | LOSO | held out |", "|---|---|---|---|---|---|"]
    for category in CATEGORIES:
        s = stats(category, category_errors(rows, category))
        loso = stats(category, category_errors(rows, category, "loso"))
        out = stats(category, category_errors(rows, category, held_out=True))
        held = f"{headline(category, out)}, {target_met(category, out)} ({out.count})" if out.count else "no data"
        left = f"{headline(category, loso)}, {target_met(category, loso)}" if loso.count else "no data"
        lines.append(f"| {category} | {TARGETS[category][1]} | {headline(category, s)} | {target_met(category, s)} "
                     f"| {left} | {held} |")
    found = [error(r.calibrated, r.point.measured) for r in rows if r.point.category == "speed" and r.counted]
    cal = stats("speed", [e for e in found if e is not None])
    if cal.count:
        verdict = "met" if cal.median_abs is not None and cal.median_abs <= CALIBRATED_TARGET else "missed"
        lines.append(f"| {CALIBRATED} | median \\|err\\| ≤ 10% | {pct(cal.median_abs, False)} | {verdict} | – | – |")
    loso5 = unsafe5(memory_errors(rows, "loso"))
    verdict5 = "no data" if loso5 is None else "met" if loso5 <= UNSAFE_TARGET else "missed"
    lines.append(f"| {MEMORY_ROW} | ≤ 1 in 10 more than 5% under | {pct(unsafe5(memory_errors(rows)), False)} | "
                 f"– | {pct(loso5, False)}, {verdict5} | – |")
    return lines


UNUSED = "sources used in no constant"


def unused_table(rows: Sequence[Row], result: Any) -> list[str]:
    """The issue's targets, stated on the points whose sources no constant was set from (their in-sample
    error is a leave-one-source-out error by construction)."""
    used = result.used_sources()
    free = {k for k in result.sources if k not in used}
    lines = [f"| {UNUSED} | target | points | value | verdict |", "|---|---|---|---|---|"]

    def verdict(value: float | None, limit: float) -> str:
        return "no data" if value is None else "met" if value <= limit else "missed"

    train = stats("training_peak", category_errors(rows, "training_peak", sources=free))
    lines.append(f"| training_peak | median \\|err\\| ≤ 10% | {train.count} | {pct(train.median_abs, False)} | "
                 f"{verdict(train.median_abs, 0.10)} |")
    mem = memory_errors(rows, sources=free)
    lines.append(f"| memory points, all categories | ≤ 1 in 10 more than 5% under | {len(mem)} | "
                 f"{pct(unsafe5(mem), False)} | {verdict(unsafe5(mem), UNSAFE_TARGET)} |")
    longest = stats("max_seq_len", category_errors(rows, "max_seq_len", sources=free))
    lines.append(f"| max_seq_len | never > 10% above what trained | {longest.count} | {pct(longest.worst)} | "
                 f"{verdict(longest.worst, 0.10)} |")
    speed = stats("speed", category_errors(rows, "speed", sources=free))
    lines.append(f"| speed | median \\|err\\| ≤ 20% | {speed.count} | {pct(speed.median_abs, False)} | "
                 f"{verdict(speed.median_abs, 0.20)} |")
    return lines


def point_table(rows: Sequence[Row], baseline: bool, peers: Sequence[str], calibrated: bool = False,
                loso: bool = False) -> list[str]:
    head = ["id", "GPU", "measured", "gpuscout", "err"]
    if loso:
        head.append("LOSO")
    if baseline:
        head.append("before")
    if calibrated:
        head.append("LOO")
    head += [*peers, "source"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        p = r.point
        unit = quantity_unit(p.quantity)
        oom = p.extra.get("oom_seq_len_tokens")
        past_oom = oom is not None and (r.after.get("value") or 0) >= oom  # says a length that ran out fits
        exact = r.after.get("exact")
        shown = fmt_value(r.after.get("value"), p.quantity) + (f" ({exact:,.0f})" if exact is not None else "")
        mark = ("" if p.certain else " (?)") + (" ‡" if r.in_sample else "")
        cells = [p.id + mark, p.gpu or "–", f"{fmt_value(p.measured, p.quantity)} {unit}",
                 shown + (" ≥OOM" if past_oom else ""), pct(r.err())]
        if loso:
            cells.append(pct(r.err("loso")))
        if baseline:
            cells.append(pct(r.err("before")))
        if calibrated:
            cells.append(pct(error(r.calibrated, p.measured)))
        cells += [pct(r.peer_err(peer)) + ("†" if r.peers.get(peer, PeerResult(None)).says_oom else "")
                  for peer in peers]
        cells.append(source_link(p.source))
        lines.append("| " + " | ".join(_escape(c) for c in cells) + " |")
    return lines


MAPPING = """\
| measured | compared with |
|---|---|
| weights_* | the sum of the weight terms of `estimate_memory` |
| kv_gib | the vLLM KV budget itself ("Available KV cache memory") |
| kv_tokens | vLLM KV budget ÷ KV bytes per token |
| kv_blocks | KV budget ÷ (bytes per token × block; 16 unless stated) |
| max_concurrency | KV budget ÷ KV bytes of one sequence (unrounded) |
| activation_* | the activation terms of the inference estimate |
| cuda_graph_* | the CUDA-graphs term |
| profile_peak_* | weights + activation terms (vLLM's profile run: no KV cache, no graphs) |
| peak_allocated_* | peak − allocator reserve − freed-logits block − CUDA context − NCCL − vLLM engine reserve |
| peak_reserved_* | peak − CUDA context − NCCL − vLLM engine reserve |
| nvidia_smi_* | the whole peak − vLLM engine reserve |
| max_seq_len_tokens | largest seq_len that fits, rounded down to 256 |
| speed | the matching `estimate_speed` metric (uncalibrated) |

The KV budget is gpu_memory_utilization × usable memory − every non-KV term of the serving estimate
(the budget `max_concurrency` divides). The vLLM engine reserve is the (1 − utilization) share
vLLM leaves unused, which no measurement sees. A vLLM profile-run peak holds weights and
activations but no KV cache and no CUDA graphs, so it is compared with those terms only.

"unsafe (LOSO)" is the share of counted points, predicted leave-one-source-out, in the direction
that costs money: memory estimated below the measurement (the job runs out of memory), KV
capacity or longest sequence estimated above it. Peers: the median
\\|err\\| of the counted points each covers, with how many in brackets; "–" where it covers none.
Peer sizes are whole-model figures, divided by tensor_parallel for per-GPU points.

What each peer's number is (all three run offline, on the bundled preset configs):

- accelerate: `accelerate estimate-memory`'s own code (gather_data) on a local folder holding the
  preset's config.json; only its Hub metadata call is answered locally. "Total Size" at the dtype
  for weights and serving peaks (it builds AutoModel, without an untied lm_head); "Training using
  Adam" for single-GPU full fine-tunes with AdamW.
- llm-analysis 0.2.2: LLMAnalysis built from the preset config and the catalog GPU. Weights:
  weight_memory_per_gpu; training peaks: weight + optimizer + gradient + activation memory (full
  fine-tunes only); serving peaks: the larger of its two fit checks (weights + prefill activations;
  weights + KV cache + decode activations); speed: latency_per_iter, prefill and decode latency.
- hf-mem: its own client and parser, with the HTTP transport answering the Hub's URLs from headers
  generated here (each parameter of the preset built on the meta device; no tensor data). Weights:
  `memory`; LLM serving peaks: `total_memory` with --experimental (weights + KV cache for the job's
  context × concurrency); image peaks: `memory`, all it reports for a pipeline.
"""


def markdown(rows: Sequence[Row], header: dict[str, str], peers: Sequence[str], peer_notes: dict[str, str],
             baseline: bool, calibrated: bool, format_errors: Sequence[str], loso_result: Any = None) -> str:
    out = ["# gpuscout against published measurements", ""]
    out += [f"- {key}: {value}" for key, value in header.items()]
    out += ["", "Error = estimate ÷ measured − 1. Only points marked certain, that gpuscout can",
            "express, count in the medians; the others are listed below.", ""]
    out += ["## 1. Per category", "", *summary_table(rows, baseline, peers, calibrated), ""]
    for peer, note in peer_notes.items():
        out.append(f"- {peer}: {note}")
    out += ["", "LOSO: the same statistic with each source's points predicted by constants fitted without",
            "that source (leave one source out, section 2). \"unsafe (LOSO)\" is the share of those",
            "predictions on the side that costs money (section 4); \"unsafe >5% (LOSO)\" the share off on that",
            f"side by more than 5%. \"{MEMORY_ROW}\": every counted GiB / GB / MiB point of every category.", ""]
    if loso_result is not None:
        out += ["## 2. Leave one source out", "", *loso_section(rows, loso_result), ""]
    out += ["## 3. Targets", "", *targets_table(rows, loso_result), ""]
    if loso_result is not None:
        out += [f"On the points of the {UNUSED} (section 2), where the in-sample error is already a",
                "leave-one-source-out error:", "", *unused_table(rows, loso_result), ""]
    out += ["## 4. What each measurement is compared with", "", MAPPING]
    out += ["## 5. Points", "", "(?) marks an uncertain point (not in the medians); ≥OOM, a longest sequence at or",
            "past the first length the source saw run out of memory; † a peer that says the job does not fit",
            "(its sizes are compared all the same). A longest sequence is a multiple of 256, the exact",
            "largest fitting length in brackets. LOO: the speed error after a leave-one-out calibration",
            "fitted on the other points of the same GPU and phase (– where the point has no partner).",
            "‡ marks an in-sample point: a gpuscout constant was set from it (its `informs` field names",
            "which), so its error tests the rest of the model, not that constant. \"held out\" in sections 1",
            "and 3 is the same statistic without the in-sample points, with how many remain. LOSO (in",
            "the tables of categories with a refitted constant): the error with the constants fitted",
            "without the point's source (section 2).", ""]
    for category in CATEGORIES:
        shown = [r for r in rows if r.point.category == category and r.inexpressible is None
                 and r.after["status"] == "ok"]
        if shown:
            refit = any(r.loso is not None and r.loso != r.after.get("value") for r in shown)
            out += [f"### {category}", "",
                    *point_table(shown, baseline, peers, calibrated and category == "speed", refit), ""]
    out += ["## 6. Inexpressible points", ""]
    left = [r for r in rows if r.inexpressible is not None]
    out += [f"- `{r.point.id}` ({r.point.category}): {_escape(r.inexpressible or '')}{_estimated(r)}"
            for r in left] or ["none"]
    out += ["", "## 7. Failed points", ""]
    failed = [f"- `{r.point.id}`: {_escape(str(r.after['detail']))}" for r in rows
              if r.after["status"] == "failed" and r.inexpressible is None]
    failed += [f"- `{r.point.id}`: {peer}: {_escape(res.note)}" for r in rows
               for peer, res in r.peers.items() if res.failed]
    failed += [f"- format: {_escape(e)}" for e in format_errors]
    out += failed or ["none"]
    return "\n".join(out) + "\n"
