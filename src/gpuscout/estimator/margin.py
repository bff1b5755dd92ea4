"""Fits, tight, does not fit: a fit judged against the estimator's own error on the out-of-memory side.

A peak estimate is not exact. `margins.toml` (beside this module) holds, per job kind and per setup
where the validation shows a distinct error (sharded training, QLoRA, CPU offload, VAE slicing …),
the largest amount by which a published measurement exceeded gpuscout's estimate, with every
constant fitted without that measurement's source (leave one source out). The file is written by
`benchmarks/published_error.py --write-margins` from `validation/published/`, with its derivation;
a test holds it to what the benchmark derives (docs/estimator.md §2.15).

A job whose headroom is smaller than its band × its peak is *tight*: the estimate says it fits, but
a measured peak as far above the estimate as the worst one seen would not. `--margin PCT` replaces
the band with the user's own figure.
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any, Literal

from gpuscout.errors import GpuscoutError
from gpuscout.frozen import Frozen
from gpuscout.workload.job import FinetuneJob, ImageJob, InferenceJob, Job, VideoJob

MARGINS_FILE = Path(__file__).with_name("margins.toml")
Verdict = Literal["fits", "tight", "does not fit"]
FITS: Verdict = "fits"
TIGHT: Verdict = "tight"
NO_FIT: Verdict = "does not fit"

# The validation category a job kind's peak is checked in.
KIND_CATEGORY = {"finetune": "training_peak", "inference": "inference_peak", "image": "image_peak",
                 "video": "video_peak"}
CATEGORY_WORDS = {"training_peak": "training peaks", "inference_peak": "serving peaks",
                  "image_peak": "image peaks", "video_peak": "video peaks"}
# A training sequence or serving context past this many tokens is "long context" (no published point
# yet: the setup is named so a band can be added when one is).
LONG_CONTEXT_TOKENS = 16_384
ALL = "all"  # the band of a category's points that have none of the setups below


def setups_of(job: Job) -> tuple[str, ...]:
    """The setups of a job whose error the validation tracks separately (the benchmark uses this too)."""
    found: list[str] = []
    if isinstance(job, FinetuneJob):
        if job.gpus > 1 and job.sharding != "none":
            found.append("sharded")
        if job.method == "qlora":
            found.append("qlora")
        if job.optimizer_offload or job.offload_params or job.activation_offload:
            found.append("cpu offload")
        if job.offload_params:
            # Its own group as well: gathered units, their staged shards and their gradients are allocated
            # and freed every micro-batch at different sizes, so the caching allocator's reserve grows past
            # the resident-run 10% by an amount no formula gives (docs/estimator.md §2.14); only points
            # measured with parameter offload can say by how much.
            found.append("parameter offload")
        if job.seq_len > LONG_CONTEXT_TOKENS:
            found.append("long context")
    elif isinstance(job, InferenceJob):
        if job.tensor_parallel > 1:
            found.append("tensor parallel")
        if job.prompt_tokens + job.output_tokens > LONG_CONTEXT_TOKENS:
            found.append("long context")
    elif isinstance(job, ImageJob | VideoJob):
        if job.offload != "none":
            found.append("cpu offload")
        if isinstance(job, ImageJob) and job.vae_slicing:
            found.append("vae slicing")
    return tuple(found)


SETUP_JOIN = " + "


def setup_key(setups: Sequence[str]) -> str:
    """The name of a group of points measured with these setups together: 'cpu offload + vae slicing'."""
    return SETUP_JOIN.join(sorted(setups))


class BandRow(Frozen):
    """One line of margins.toml: the band of one category, or of one setup within it."""

    category: str
    setup: str  # ALL, or one of setups_of's names
    band: float  # fraction of the estimated peak: measured ÷ estimate − 1 at its worst (≥ 0)
    points: int
    sources: tuple[str, ...]
    worst: str  # the point that set it ('' when none was under)
    note: str = ""


class Band(Frozen):
    """The band a job's fit is judged with, and where it comes from in words."""

    fraction: float
    category: str
    setups: tuple[str, ...]  # the setups whose band was taken (the largest applies)
    basis: str  # one line: what the number is
    override: bool = False  # --margin


class Margins(Frozen):
    rows: tuple[BandRow, ...]
    derivation: dict[str, str]


class MarginsError(GpuscoutError):
    pass


@cache
def load_margins(path: Path = MARGINS_FILE) -> Margins:
    try:
        raw: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
        rows = tuple(BandRow(**{**r, "sources": tuple(r["sources"])}) for r in raw["band"])
        derivation = {str(k): str(v) for k, v in raw["derivation"].items()}
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as exc:
        raise MarginsError(f"cannot read the error bands in {path}", why=str(exc),
                           fix="reinstall gpuscout, or rewrite the file with "
                               "benchmarks/published_error.py --write-margins") from exc
    return Margins(rows=rows, derivation=derivation)


def band_for(job: Job, margin_pct: float | None = None, margins: Margins | None = None) -> Band:
    """The band for `job`: the largest of its category's band and each of its setups' bands."""
    category = KIND_CATEGORY[job.kind]
    if margin_pct is not None:
        return Band(fraction=margin_pct / 100.0, category=category, setups=(), override=True,
                    basis=f"--margin {margin_pct:g}%")
    table = margins or load_margins()
    has = set(setups_of(job))
    # The category's row, and each group measured with setups this job all has: a band measured with
    # VAE slicing and offload together does not apply to a job that only slices.
    chosen = [r for r in table.rows if r.category == category
              and (r.setup == ALL or set(r.setup.split(SETUP_JOIN)) <= has)]
    if not chosen:
        raise MarginsError(f"no error band for {category}", why="margins.toml has no row for it",
                           fix="rewrite the file with benchmarks/published_error.py --write-margins")
    top = max(chosen, key=lambda r: r.band)
    label = CATEGORY_WORDS.get(category, category) + ("" if top.setup == ALL else f", {top.setup}")
    basis = (f"{top.band:.0%} for {label}: the largest under-estimate of {top.points} published "
             f"point{'s' if top.points != 1 else ''} from {len(top.sources)} "
             f"source{'s' if len(top.sources) != 1 else ''}, each predicted without its own source")
    return Band(fraction=top.band, category=category, setups=tuple(r.setup for r in chosen if r.setup != ALL),
                basis=basis)


def guarded_peak_limit(usable_bytes: int, band: Band) -> int:
    """The largest estimated peak that still *fits* (not *tight*) in `usable_bytes` under `band`."""
    peak = int(usable_bytes / (1.0 + band.fraction))
    # The division rounds either way in floating point; step to the exact edge judge_fit draws.
    while judge_fit(peak + 1, usable_bytes, band) == FITS:
        peak += 1
    while peak > 0 and judge_fit(peak, usable_bytes, band) != FITS:
        peak -= 1
    return peak


def judge_fit(peak_bytes: int, usable_bytes: int, band: Band) -> Verdict:
    """fits: the headroom covers the band (headroom ≥ band × peak); tight: it fits, but inside the band;
    does not fit: the estimated peak is above usable memory. Exactly at the band edge it fits."""
    if peak_bytes > usable_bytes:
        return NO_FIT
    if usable_bytes - peak_bytes < band.fraction * peak_bytes:
        return TIGHT
    return FITS


def check_margin_pct(value: float) -> float:
    """A user's --margin: a percentage in [0, 500]."""
    if not 0.0 <= value <= 500.0 or value != value:
        raise MarginsError(f"--margin {value:g} is out of range",
                           why="it is the headroom to demand, as a percentage of the estimated peak",
                           fix="give a number from 0 to 500, e.g. --margin 15")
    return value
