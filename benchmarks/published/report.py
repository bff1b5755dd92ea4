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


def unsafe(category: str, err: float) -> bool:
    """The direction that costs the user: memory or KV estimated low, a longest sequence estimated high."""
    if category in ("max_seq_len", "kv_capacity"):
        return err > 0
    return err < 0 and category != "speed"


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
    unsafe_share: float | None


def stats(category: str, errors: Sequence[float]) -> Stats:
    if not errors:
        return Stats(0, None, None, None)
    worst = max(errors) if category == "max_seq_len" else max(errors, key=abs)
    share = sum(unsafe(category, e) for e in errors) / len(errors)
    return Stats(len(errors), statistics.median(abs(e) for e in errors), worst, share)


def category_errors(rows: Sequence[Row], category: str, which: str = "after", held_out: bool = False) -> list[float]:
    """Errors of the counted points of `category`; `held_out` leaves out the in-sample ones."""
    found = (r.err(which) for r in rows if r.point.category == category and r.counted
             and not (held_out and r.in_sample))
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
    head = ["category", "points", "median \\|err\\|", "LOSO", "held out", "worst", "LOSO worst", "unsafe (LOSO)"]
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
                 else "–", held, pct(s.worst), pct(loso.worst), pct(loso.unsafe_share, False)]
        if baseline:
            cells[2:2] = [pct(stats(category, category_errors(rows, category, "before")).median_abs, False)]
        for peer in peers:
            errs = peer_errors(rows, category, peer)
            cells.append(f"{pct(stats(category, errs).median_abs, False)} ({len(errs)})" if errs else "–")
        lines.append("| " + " | ".join(cells) + " |")
        if category == "speed" and calibrated:
            found = [error(r.calibrated, r.point.measured) for r in rows if r.point.category == "speed" and r.counted]
            cal = stats("speed", [e for e in found if e is not None])
            row = [CALIBRATED, str(cal.count), pct(cal.median_abs, False), "–", "–", pct(cal.worst), "–", "–"]
            if baseline:
                row[2:2] = ["–"]
            lines.append("| " + " | ".join(row + ["–"] * len(peers)) + " |")
    return lines


def loso_section(rows: Sequence[Row], result: Any) -> list[str]:
    """What was refitted without each source, what was not and why (published/loso.py)."""
    from published import loso

    out = ["Each source's points are predicted with every constant it informed refitted on the other",
           "sources' counted points (a source = one repository file or one issue/PR thread). Rule: the",
           "grid value with the least sum of \\|estimate ÷ measured − 1\\| over the category's counted",
           "points, constants of one category fitted together by coordinate descent. The committed",
           "constants were set by hand from those runs, so the rule's fit on every source is shown too.", "",
           "| constant | fitted on | committed | rule, all sources | rule, without … |", "|---|---|---|---|---|"]
    for constant in loso.FITTED:
        fits = result.fits.get(constant.category, {})
        every = fits.get("")
        without = [f"{key}: {constant.shown(fit[constant]) if fit else 'nothing left'}"
                   for key, fit in fits.items() if key]
        out.append(f"| `{constant.label}` | {constant.category} | {constant.shown(loso.committed()[constant])} | "
                   f"{constant.shown(every[constant]) if every else '–'} | {'; '.join(without) or '–'} |")
    out += ["", "Where LOSO equals in-sample, and why:", ""]
    out += [f"- {category}: no gpuscout constant was fitted on these points, so leaving a source out changes "
            "nothing (LOSO = in-sample)." for category in loso.NOT_FITTED]
    out.append("- training_peak, nvidia-smi points: the 10% allocator reserve (`overhead.ALLOCATOR_FRACTION`) "
               "comes from fms-acceleration PR #14, the same project as the fms points but not one of them; "
               "it is kept as a prior, not refitted.")
    out += [f"- {category}: no LOSO figure: {why}." for category, why in loso.NO_LOSO.items()]
    missing = sorted({r.point.id for r in rows if r.loso_note and r.counted})
    if missing:
        out.append(f"- no LOSO estimate ({len(missing)} points): nothing left to fit their constants on.")
    return out


def targets_table(rows: Sequence[Row]) -> list[str]:
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
            "predictions on the side that costs money (section 4).", ""]
    if loso_result is not None:
        out += ["## 2. Leave one source out", "", *loso_section(rows, loso_result), ""]
    out += ["## 3. Targets", "", *targets_table(rows), ""]
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
