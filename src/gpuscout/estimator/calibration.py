"""Calibration: efficiency factors learned from the user's own bench results (docs/estimator.md §3.11).

The default factors (`efficiency.toml`) come from published measurements of other people's software
on other machines. A bench result holds the real thing: the job, the GPU, and the measured time of
each phase. Re-estimating the same job on the same catalog GPU with the defaults pairs every measured
phase time with the estimated one:

    training step (step_s) → "training"     TTFT (ttft_s) → "prefill"     TPOT (tpot_s) → "decode"
    denoiser step (denoiser_step_s) → "image", or "video" for a DiT denoiser where that kind exists

Per (GPU SKU, phase) the multiplier k is the geometric mean of measured / estimated. A phase's time
is max(FLOPs / (peak × compute), bytes / (bandwidth × bandwidth factor)), so dividing both factors by
k multiplies the time by k: the calibrated factors are default / k, clamped to at most 1 (a clamp is
recorded and shown: the estimate then stays slower than the measurement). The band becomes a 95%
prediction interval of the log ratio, never narrower than the measurement noise and never wider than
the default band.

A calibration is active for `estimate_speed(..., calibration=...)` or inside
`efficiency.calibrated(...)`; the file lives in the user's config folder (`default_calibration_path`).
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field, ValidationError, model_validator

from gpuscout.errors import SpecError
from gpuscout.estimator.efficiency import EFFICIENCY_KINDS, Efficiency, active_source, calibrated, default_efficiency
from gpuscout.estimator.serving.model import StepCosts
from gpuscout.frozen import Frozen
from gpuscout.hardware.catalog import Gpu, lookup_gpu
from gpuscout.results.schema import TPOT_S, TTFT_S
from gpuscout.stats import t975
from gpuscout.userfile import MIB, first_invalid_field, parse_user_toml, read_user_text, shown

CALIBRATION_VERSION = 1
MAX_CALIBRATION_BYTES = 4 * MIB  # ~10,000 observations; a real file holds tens
# Floor of the log-space spread: repeats that agree to the last digit still carry the timer's and the
# clock's jitter. ASSUMPTION: 1% is the smallest run-to-run spread gpuscout trusts; torch.utils.benchmark
# flags a spread (IQR/median) above 10% as noisy, so 1% is an order of magnitude below "noisy".
MIN_SD = 0.01
# The widest gap between measured and estimated time a calibration may learn: a millionfold either way
# (the calibration file's own bound on `factor`). The defaults sit within a few × of published
# measurements (efficiency.toml), so a gap past it is another machine, job or unit, not an efficiency;
# refused with the ratio, never a traceback. The spread's bound is the file's too (`sd` below 100).
MAX_FACTOR = 1e6
MAX_SD = 100.0
# The band is never narrower than GPUs of one SKU differ from each other: a calibration is used to time
# the job on other machines of that SKU (pick). Sinha et al., "Not All GPUs Are Created Equal" (SC22,
# arXiv 2208.11035): 8% average performance variation (max 22%) across GPUs of the same SKU in a cluster.
SKU_VARIATION = 0.08
FILE_NAME = "calibration.toml"
_FIX = "Run `gpuscout calibrate RESULT.json …` again to rewrite it, or pass --no-calibration."


# ---------------------------------------------------------------- observations ----------------

@dataclass(frozen=True)
class Observation:
    """One measured phase time beside the default estimate of the same job on the same GPU."""

    gpu_sku: str
    phase: str  # an efficiency kind: training, prefill, decode, image (video where it exists)
    measured_s: float
    estimated_s: float
    machine: str  # the GPU's name as the driver reported it (and the host CPU)
    date: date
    source: str  # "sha256:<hex>" of the result file
    case: str = ""
    noise_sd: float | None = None  # log-space SD of the measured samples; None with a single sample
    samples: int = 1
    gpuscout_version: str = ""

    @property
    def log_ratio(self) -> float:
        return math.log(self.measured_s / self.estimated_s)


@dataclass(frozen=True)
class Extracted:
    """The observations one result gave, and why any of it could not be used."""

    observations: tuple[Observation, ...] = ()
    skipped: tuple[str, ...] = ()


# ---------------------------------------------------------------- the fitted calibration -------

class CalibrationEntry(Frozen):
    """The fit for one GPU and phase: time multiplier, spread, band, and where it came from."""

    gpu_sku: str = Field(min_length=1, max_length=255)
    phase: str = Field(min_length=1, max_length=40)
    factor: float = Field(gt=0, lt=1e6)  # measured / estimated, geometric mean over the runs
    sd: float = Field(gt=0, lt=100)  # log-space spread the band is built from
    runs: int = Field(ge=1)
    band_low: float = Field(gt=0, le=1)
    band_high: float = Field(ge=1)
    clamped: bool = False  # default / factor exceeded 1 and was held at 1
    machines: tuple[str, ...] = ()
    first_date: date
    last_date: date
    gpuscout_version: str = ""
    sources: tuple[str, ...] = ()


class Calibration(Frozen):
    """Fitted entries and the observations they were fitted from (kept, so a later run can refit)."""

    version: int = CALIBRATION_VERSION
    entries: tuple[CalibrationEntry, ...] = ()
    observations: tuple[ObservationRecord, ...] = ()
    serving: tuple[ServingEntry, ...] = ()  # step-cost factors of the serving simulator, from load results

    def entry(self, gpu_sku: str, phase: str) -> CalibrationEntry | None:
        return next((e for e in self.entries if e.gpu_sku == gpu_sku and e.phase == phase), None)

    def efficiency_for(self, gpu: Gpu, phase: str, default: Efficiency) -> Efficiency:
        """`default` with its compute and bandwidth factors divided by the fitted multiplier (at most 1)
        and the fitted band; `default` itself where this GPU and phase have no entry."""
        found = self.entry(gpu.sku, phase)
        return default if found is None else apply_entry(found, default)

    def gpus(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(e.gpu_sku for e in self.entries))

    def serving_factors(self, gpu_sku: str) -> ServingFactors | None:
        """The step-cost calibration of one GPU: per term, the geometric mean over its serving entries (each a
        load result fitted on its own model); None where no load result on this GPU was calibrated."""
        found = [e for e in self.serving if e.gpu_sku == gpu_sku]
        if not found:
            return None
        combined: list[dict[str, float]] = [{}, {}]
        for kind, values in zip(("factors", "seconds"), combined, strict=True):
            for term in SERVING_TERMS:
                seen = [getattr(e, kind)[term] for e in found if term in getattr(e, kind)]
                if len(seen) == 1:
                    values[term] = seen[0]
                elif seen:  # a host term of 0 s (none measured) is averaged plainly
                    values[term] = (math.exp(statistics.fmean(math.log(v) for v in seen)) if min(seen) > 0
                                    else statistics.fmean(seen))
        machines = ", ".join(dict.fromkeys(e.machine for e in found if e.machine)) or gpu_sku
        last = max(e.date for e in found).isoformat()
        note = (f"calibrated from {len(found)} load result{'s' if len(found) != 1 else ''} on {machines}, {last} "
                f"({', '.join(dict.fromkeys(e.model for e in found))})")
        return ServingFactors(gpu_sku=gpu_sku, factors=combined[0], seconds=combined[1], note=note)


class ObservationRecord(Frozen):
    """An `Observation` as the file keeps it."""

    gpu_sku: str = Field(min_length=1, max_length=255)
    phase: str = Field(min_length=1, max_length=40)
    measured_s: float = Field(gt=0, lt=1e12)
    estimated_s: float = Field(gt=0, lt=1e12)
    machine: str = Field(max_length=500)
    date: date
    source: str = Field(max_length=200)
    case: str = Field("", max_length=500)
    noise_sd: float | None = Field(None, ge=0, lt=100)
    samples: int = Field(1, ge=1)
    gpuscout_version: str = Field("", max_length=100)

    @classmethod
    def of(cls, obs: Observation) -> ObservationRecord:
        return cls(**{name: getattr(obs, name) for name in cls.model_fields})

    def observation(self) -> Observation:
        return Observation(**self.model_dump())


# ---------------------------------------------------------------- the serving simulator's step costs --------

# The terms of the serving simulator's per-step cost (`estimator.serving.model.StepCosts`) a load result can
# calibrate. Device terms (weights, KV, FLOPs, links) scale with the model, so a fit is kept as a factor over
# the speed model's estimate (fitted / estimated), which carries over to another model on the same GPU. Host
# terms (a step's fixed overhead: scheduling, launches, sampling; a request's HTTP, tokenising, streaming; a
# sequence's per-step sampling and streaming) do not grow with the model, and the estimate of the step
# overhead is 0 with CUDA graphs: they are kept as fitted seconds. A term the fit left alone keeps the estimate.
SERVING_TERMS = ("overhead_s", "weights_s", "expert_weights_s", "kv_read_s_per_token", "compute_s_per_token",
                 "attention_s_per_pair", "comm_s_per_token", "request_overhead_s", "seq_s")
# seq_s (host time per sequence a step: sampling, detokenizing, streaming) is 0 in the estimate too.
HOST_TERMS = ("overhead_s", "request_overhead_s", "seq_s")
MAX_HOST_S = 3600.0  # the simulator's own bound on one step's cost (estimator.serving.model.MAX_STEP_S)


class ServingEntry(Frozen):
    """One load result's fit of the simulator's step costs on one GPU: device terms as factors over the speed
    model's estimate of the same served job, host terms in seconds."""

    model_config = ConfigDict(allow_inf_nan=False)

    gpu_sku: str = Field(min_length=1, max_length=255)
    model: str = Field(min_length=1, max_length=500)  # the served model the load result measured
    factors: dict[str, float] = Field(default_factory=dict)  # device term → fitted / estimated
    seconds: dict[str, float] = Field(default_factory=dict)  # host term → fitted seconds
    points: int = Field(ge=1)  # load levels the fit used
    residuals: dict[str, float] = Field(default_factory=dict)  # metric → RMS of log(simulated / measured)
    machine: str = Field("", max_length=500)
    date: date
    source: str = Field(max_length=200)  # "sha256:<hex>" of the load result
    gpuscout_version: str = Field("", max_length=100)

    @model_validator(mode="after")
    def _known_terms(self) -> ServingEntry:
        for term, factor in self.factors.items():
            if term not in SERVING_TERMS or term in HOST_TERMS:
                raise ValueError(f"unknown step-cost factor {term!r}; the factors are "
                                 f"{', '.join(t for t in SERVING_TERMS if t not in HOST_TERMS)}")
            if not 1 / MAX_FACTOR < factor < MAX_FACTOR:
                raise ValueError(f"factor {term} = {factor!r} is outside {1 / MAX_FACTOR:g} to {MAX_FACTOR:g}")
        for term, value in self.seconds.items():
            if term not in HOST_TERMS:
                raise ValueError(f"unknown host term {term!r}; the host terms are {', '.join(HOST_TERMS)}")
            if not 0 <= value <= MAX_HOST_S:
                raise ValueError(f"{term} = {value!r} s is outside 0 to {MAX_HOST_S:g} s")
        return self


@dataclass(frozen=True)
class ServingFactors:
    """One GPU's step-cost calibration, combined over its serving entries, and a line saying where it came from."""

    gpu_sku: str
    factors: dict[str, float]  # device term → multiplier
    note: str
    seconds: dict[str, float] = field(default_factory=dict)  # host term → seconds

    def apply(self, costs: StepCosts) -> StepCosts:
        """`costs` with each device term multiplied by its factor, each host term replaced by its seconds, and
        the source saying so."""
        update: dict[str, Any] = {t: getattr(costs, t) * f for t, f in self.factors.items()}
        update |= self.seconds
        update["source"] = f"{self.note} | {costs.source}"[:500]
        return StepCosts.model_validate(costs.model_dump() | update)  # validated: a factor keeps the bounds


def active_serving_factors(gpu_sku: str) -> ServingFactors | None:
    """The step-cost factors of `gpu_sku` in the calibration in force (`efficiency.calibrated`), if any."""
    source = active_source()
    return source.serving_factors(gpu_sku) if isinstance(source, Calibration) else None


def merge_serving(old: Calibration | None, new: Iterable[ServingEntry]) -> tuple[ServingEntry, ...]:
    """The old file's serving entries and the new ones; a re-read load result replaces its twin."""
    by_key: dict[tuple[str, str, str], ServingEntry] = {}
    for entry in (*(old.serving if old is not None else ()), *new):
        by_key[(entry.source, entry.gpu_sku, entry.model)] = entry
    return tuple(sorted(by_key.values(), key=lambda e: (e.gpu_sku, e.model, e.date)))


Calibration.model_rebuild()


def apply_entry(entry: CalibrationEntry, default: Efficiency) -> Efficiency:
    """The calibrated factors: default / factor, clamped to (0, 1]; the band within the default's."""
    compute = min(default.compute / entry.factor, 1.0)
    bandwidth = min(default.bandwidth / entry.factor, 1.0)
    low = min(max(entry.band_low, default.band_low), 1.0)
    high = max(min(entry.band_high, default.band_high), 1.0)
    if not low < high:  # a default band of exactly 1 at one end: keep the default band
        low, high = default.band_low, default.band_high
    note = (f"calibrated: measured/estimated {entry.factor:.3g} over {entry.runs} run(s) on "
            f"{', '.join(entry.machines) or entry.gpu_sku}, {entry.last_date.isoformat()}"
            + (" (clamped at 1: the measurement beat the roofline at the default factors)" if entry.clamped else ""))
    return default.model_copy(update={"compute": compute, "bandwidth": bandwidth, "band_low": low,
                                      "band_high": high, "source": f"{note} | default: {default.source}"})


# ---------------------------------------------------------------- fitting ----------------------

def fit_calibration(observations: Iterable[Observation]) -> Calibration:
    """Fit every (GPU SKU, phase) the observations cover; the observations are kept in the result."""
    kept = list(_deduplicated(observations))
    groups: dict[tuple[str, str], list[Observation]] = {}
    for obs in kept:
        groups.setdefault((obs.gpu_sku, obs.phase), []).append(obs)
    entries = tuple(_fit_group(sku, phase, group) for (sku, phase), group in sorted(groups.items()))
    return Calibration(entries=entries, observations=tuple(ObservationRecord.of(o) for o in kept))


def merge_calibration(old: Calibration | None, new: Iterable[Observation]) -> Calibration:
    """Refit over the old file's observations and the new ones (a re-read result replaces its twin)."""
    previous = [r.observation() for r in old.observations] if old is not None else []
    return fit_calibration([*previous, *new])


def _deduplicated(observations: Iterable[Observation]) -> Iterable[Observation]:
    """One observation per (result file, case, GPU, phase): calibrating a file twice counts it once."""
    by_key: dict[tuple[str, str, str, str], Observation] = {}
    for obs in observations:
        _check_observation(obs)
        by_key[(obs.source, obs.case, obs.gpu_sku, obs.phase)] = obs
    return by_key.values()


def _check_observation(obs: Observation) -> None:
    if obs.phase not in EFFICIENCY_KINDS:
        raise SpecError(f"Observation phase {obs.phase!r} is not an efficiency kind.",
                        "A calibration replaces the factors of one phase kind of the speed model.",
                        f"Use one of: {', '.join(EFFICIENCY_KINDS)}.")
    for name in ("measured_s", "estimated_s"):
        value = getattr(obs, name)
        if not (math.isfinite(value) and value > 0):
            raise SpecError(f"Observation {name} = {value!r} is not a positive time.",
                            "A time ratio needs two positive, finite times.", "Pass measured and estimated seconds.")


def _fit_group(sku: str, phase: str, group: Sequence[Observation]) -> CalibrationEntry:
    logs = [o.log_ratio for o in group]
    n = len(logs)
    mean_log = statistics.fmean(logs)
    if not abs(mean_log) < math.log(MAX_FACTOR):
        raise _out_of_range(sku, phase, group, f"measured / estimated time is {math.exp(mean_log):.3g}",
                            f"beyond {1 / MAX_FACTOR:g} to {MAX_FACTOR:g}")
    factor = math.exp(mean_log)
    noise = _pooled_noise(group)
    residual = statistics.stdev(logs) if n > 1 else 0.0
    sd = max(residual, noise or 0.0, MIN_SD)
    if not sd < MAX_SD:
        raise _out_of_range(sku, phase, group, f"the runs' log-space spread is {sd:.3g}", f"at or past {MAX_SD:g}")
    # Degrees of freedom of the spread: the runs' own, or with one run its repeats' (docs §3.11).
    dof = n - 1 if n > 1 else group[0].samples - 1
    half = t975(dof) * sd * math.sqrt(1 + 1 / n)  # a 95% prediction interval for one more run
    half = max(half, math.log1p(SKU_VARIATION))
    default = _default_for(sku, phase)
    clamped = default is not None and max(default.compute, default.bandwidth) / factor > 1.0
    # exp() overflows past ~709: such a band is unbounded, then held within the file's bounds below.
    low, high = (math.exp(-half), math.exp(half)) if half < 700 else (0.0, math.inf)
    if default is not None:
        low, high = max(low, default.band_low), min(high, default.band_high)
        if clamped:  # held at 1, the estimate is slower than the measurement: keep the optimistic end
            low = default.band_low
    low, high = min(max(low, 1e-9), 1.0), max(high, 1.0)
    dates = sorted(o.date for o in group)
    return CalibrationEntry(
        gpu_sku=sku, phase=phase, factor=factor, sd=sd, runs=n, band_low=low, band_high=min(high, 1e6),
        clamped=clamped, machines=tuple(dict.fromkeys(o.machine for o in group if o.machine)),
        first_date=dates[0], last_date=dates[-1],
        gpuscout_version=max((o.gpuscout_version for o in group), key=_version_key, default=""),
        sources=tuple(dict.fromkeys(o.source for o in group)))


def _out_of_range(sku: str, phase: str, group: Sequence[Observation], what: str, bound: str) -> SpecError:
    worst = max(group, key=lambda o: abs(o.log_ratio))
    return SpecError(
        f"Cannot calibrate {sku} {phase}: {what}, {bound} (worst: {worst.measured_s:.3g} s measured against "
        f"{worst.estimated_s:.3g} s estimated, {shown(worst.case or worst.source, 80)}).",
        "A gap that wide is not an efficiency of this GPU: the result was measured on another machine or "
        "device (the CPU), of another job or size, or its times are in another unit.",
        "Check that result (gpuscout results show, or the file), re-run `gpuscout bench` for this job on "
        "this GPU, and calibrate without the odd result.")


def _pooled_noise(group: Sequence[Observation]) -> float | None:
    """Root mean square of the runs' own spreads (None when no run had two samples)."""
    known = [o.noise_sd for o in group if o.noise_sd is not None]
    return math.sqrt(statistics.fmean(s * s for s in known)) if known else None


def _default_for(sku: str, phase: str) -> Efficiency | None:
    gpu = lookup_gpu(sku)
    if gpu is None:
        return None
    with calibrated(None):
        return default_efficiency(gpu, phase)


def _version_key(version: str) -> tuple[int, ...]:
    parts = [p for p in version.split(".") if p.isdigit()]
    return tuple(int(p) for p in parts)


# ---------------------------------------------------------------- results → observations -------

# Measured metric → efficiency kind, per result kind. The denoiser's kind is decided per model.
_LLM_PAIRS = {"finetune": (("step_s", "training"),), "inference": ((TTFT_S, "prefill"), (TPOT_S, "decode"))}
DENOISER_METRIC = "denoiser_step_s"


def default_calibration_path() -> Path:
    """$XDG_CONFIG_HOME/gpuscout/calibration.toml, else ~/.config/gpuscout/calibration.toml.

    The XDG Base Directory spec says a relative XDG_CONFIG_HOME is invalid and must be ignored."""
    base = os.environ.get("XDG_CONFIG_HOME", "")
    folder = Path(base) if base and Path(base).is_absolute() else Path.home() / ".config"
    return folder / "gpuscout" / FILE_NAME


def load_calibration(path: Path) -> Calibration:
    """A calibration file, checked: TOML, this version or older, every field valid."""
    text = read_user_text(path, "calibration file", _FIX, max_bytes=MAX_CALIBRATION_BYTES)
    data = parse_user_toml(text, str(path), _FIX)
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise SpecError(f"{path} is not a gpuscout calibration file: its version is {shown(version)}.",
                        "gpuscout writes `version = 1` at the top of every calibration file.", _FIX)
    if version > CALIBRATION_VERSION:
        raise SpecError(f"{path} is calibration version {version}; this gpuscout reads version "
                        f"{CALIBRATION_VERSION}.", "It was written by a newer gpuscout.",
                        "Upgrade gpuscout, or pass --no-calibration (or another file with --calibration).")
    body = {"version": version, "entries": data.get("entry", []), "observations": data.get("observation", []),
            "serving": data.get("serving", [])}
    try:
        calibration = Calibration.model_validate(body)
    except ValidationError as exc:
        raise SpecError(f"{path} is not a valid calibration file: {first_invalid_field(exc)}.",
                        f"{len(exc.errors())} field(s) do not match calibration version {CALIBRATION_VERSION}.",
                        _FIX) from None
    _check_kinds(path, calibration)
    return calibration


def _check_kinds(path: Path, calibration: Calibration) -> None:
    phases = [e.phase for e in calibration.entries] + [o.phase for o in calibration.observations]
    unknown = [p for p in phases if p not in EFFICIENCY_KINDS]
    if unknown:
        raise SpecError(f"{path}: unknown phase {shown(unknown[0])}.",
                        f"A calibration entry is for one of the speed model's kinds: {', '.join(EFFICIENCY_KINDS)}.",
                        _FIX)


def save_calibration(calibration: Calibration, path: Path) -> None:
    from gpuscout.outfile import write_atomic

    write_atomic(path, calibration_toml(calibration), what="calibration file")


def calibration_toml(calibration: Calibration) -> str:
    """The file's text: a header, the entries, then the observations they were fitted from."""
    lines = ["# gpuscout calibration: efficiency factors fitted to your own bench results",
             "# (docs/estimator.md §3.11). Written by `gpuscout calibrate`; rerun it to add results.",
             "# factor = measured / estimated time (geometric mean); calibrated efficiency = default / factor.",
             *(["# [[serving]]: the serving simulator's step-cost factors (fitted / estimated) from load results",
                "# (docs/serving_sim.md)."] if calibration.serving else []),
             f"version = {CALIBRATION_VERSION}", ""]
    for entry in calibration.entries:
        lines += ["[[entry]]", *_toml_fields(entry.model_dump()), ""]
    for obs in calibration.observations:
        lines += ["[[observation]]", *_toml_fields(obs.model_dump()), ""]
    for serving in calibration.serving:  # an older gpuscout reads the file and leaves these out
        lines += ["[[serving]]", *_toml_fields(serving.model_dump()), ""]
    return "\n".join(lines)


def _toml_fields(fields: dict[str, Any]) -> list[str]:
    return [f"{key} = {_toml_value(value)}" for key, value in fields.items() if value is not None]


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value) if isinstance(value, int) or math.isfinite(value) else "inf"
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):  # an inline table; its keys quoted, so any name is a valid key
        return "{ " + ", ".join(f"{json.dumps(str(k))} = {_toml_value(v)}" for k, v in value.items()) + " }"
    # A JSON string is a TOML basic string once DEL, which TOML also requires escaped, is.
    return json.dumps(str(value), ensure_ascii=False).replace("\x7f", "\\u007f")


# ---------------------------------------------------------------- choosing one ----------------

@dataclass(frozen=True)
class ActiveCalibration:
    """The calibration estimate and pick use, and the file it came from (None: none is used)."""

    calibration: Calibration | None = None
    path: Path | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)


def active_calibration(explicit: Path | None = None, *, use: bool = True) -> ActiveCalibration:
    """--calibration FILE, else the default file where it exists; nothing with use=False."""
    if not use:
        return ActiveCalibration()
    if explicit is not None:
        return ActiveCalibration(calibration=load_calibration(explicit), path=explicit)
    path = default_calibration_path()
    if not path.is_file():
        return ActiveCalibration()
    return ActiveCalibration(calibration=load_calibration(path), path=path)
