"""The on-disk result of a measurement: versioned, plain numbers, self-describing.

A result records every fixed variable of the run (docs/measurement.md §1) so that `compare` can refuse to
call a winner between runs that differ, the environment fingerprint, and for every case its raw
samples, summary statistics, peak memory, startup phases, or the failure that stopped it.
Measured and extrapolated values (depth slicing) are kept apart and labelled.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import ConfigDict, Field, model_validator

from gpuscout.frozen import Frozen
from gpuscout.stats import Summary

# 2: cases merge independent runs (per-run samples, between-run variation, telemetry per run);
# region, billing type and checkpoint hash are fixed variables. Version 1 files are read as one run.
SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)

# Every float in a result lies within ±1e30 and every sample is 0 or at least 1e-30 in size
# (docs/design.md §4.10): no time, rate or size gpuscout measures comes near either bound, and
# within them sums, squares and ratios of any number of samples stay finite.
MAX_MAGNITUDE = 1e30
MIN_MAGNITUDE = 1e-30

Bytes = Annotated[int, Field(ge=0)]

ResultKind = Literal["finetune", "inference", "image", "video", "probe", "load", "doctor"]
# unreachable: a URL that did not answer (doctor --url)
FailureKind = Literal["oom", "crash", "unsupported", "timeout", "interrupted", "unreachable"]
Scalar = str | int | float | bool | None

# Metric names every writer and reader of a serving case shares (the bench, the load generator, the
# estimator's metrics, the pick's SLO check, the reports): time to first token, time per output token
# after it, request end to end, and the two measured from the intended send (coordinated omission).
TTFT_S = "ttft_s"
TPOT_S = "tpot_s"
E2E_S = "e2e_s"
TTFT_FROM_INTENDED_S = "ttft_from_intended_s"
E2E_FROM_INTENDED_S = "e2e_from_intended_s"
# How the machine was rented: the tiers a price sheet knows (`hardware.offers.Tier`, kept equal by a test).
BillingType = Literal["on-demand", "spot", "reserved"]

# A load level's validity verdict, as its notes record it (the load generator writes them, the reports, the
# comparison and `pick --load` read them through `level_verdict`): "valid"; one "invalid: <reason>" note
# per failed check; and one "not measured: <check>" note per check of the gate that could not run. A check
# that could not run is never counted as passed, so such a level is not valid (nor invalid: nothing failed).
VALID_NOTE = "valid"
INVALID_PREFIX = "invalid: "
NOT_MEASURED_PREFIX = "not measured: "
LevelVerdict = Literal["valid", "invalid", "not measured"]


class RunSamples(Frozen):
    """One independent run's samples of a metric (each run is a fresh process), and their summary."""

    samples: tuple[float, ...]
    summary: Summary | None = None


class Metric(Frozen):
    """One number of one case, with its raw samples when it was measured repeatedly.

    A case run several times (`bench --runs N`) keeps every run's samples in `runs`; `samples` and
    `summary` then pool them all, `value` is the mean of the run means (each run weighs the same),
    and `between_run_cv` is the spread of the run means over their mean.
    """

    name: str  # docs/measurement.md §1 names where one exists: step_s, tokens_per_s, ttft_s, tpot_s, peak_bytes …
    unit: str  # "s", "tokens/s", "bytes", "TFLOP/s", "fraction" …
    value: float  # the headline figure: the mean of the samples, or the single reading
    samples: tuple[float, ...] = ()
    summary: Summary | None = None
    higher_is_better: bool = False
    extrapolated: bool = False  # True: scaled from a depth slice, not measured (see `Case.layers`)
    note: str = ""  # formula or caveat
    runs: tuple[RunSamples, ...] = ()  # per run, when the case ran more than once
    between_run_cv: float | None = Field(None, ge=0)  # std of the run means / their mean

    @model_validator(mode="after")
    def _summary_matches_samples(self) -> Metric:
        if self.summary is not None and self.summary.n < 1:
            raise ValueError(f"{self.name}: a summary of {self.summary.n} samples")
        if self.summary is not None and self.samples and self.summary.n != len(self.samples):
            raise ValueError(f"{self.name}: a summary of {self.summary.n} samples beside {len(self.samples)} samples")
        return self


class PeakMemory(Frozen):
    """Three views of peak memory (docs/measurement.md §1); None where not available."""

    torch_allocated_bytes: Bytes | None = None  # live tensors (max_memory_allocated)
    torch_reserved_bytes: Bytes | None = None  # held by the caching allocator (max_memory_reserved)
    nvml_used_bytes: Bytes | None = None  # sampled process/device use, including the CUDA context
    # NVML device `used` (every process on the GPU, other tenants too); nvml_used_bytes is then this
    # process's own `usedGpuMemory` where NVML reports it per process, else the device view again.
    nvml_device_used_bytes: Bytes | None = None
    process_rss_bytes: Bytes | None = None  # CPU runs: peak resident set of the case's process
    device_total_bytes: Bytes | None = None
    extrapolated_allocated_bytes: Bytes | None = None  # depth slice scaled to the full model


class StartupPhase(Frozen):
    name: str  # since_boot, imports, cuda_init, model_build, first_step …
    seconds: float


class Failure(Frozen):
    case: str
    kind: FailureKind
    message: str
    size: dict[str, Scalar] = Field(default_factory=dict)  # the size that failed: micro_batch, seq_len, concurrency …


# --- Telemetry (recorded by `measure.telemetry` during every bench case, docs/measurement.md §1.13) ---

FindingKind = Literal["thermal_throttle", "power_cap", "hw_slowdown", "degraded_link", "shared_device",
                      "ecc_errors", "cpu_contention", "cpu_steal"]


class GpuTelemetry(Frozen):
    """One case's GPU, summarised from NVML samples. None = NVML could not say."""

    samples: int
    busy_samples: int  # the samples throttling and the link are judged on
    duration_s: float
    sm_clock_busy_max_mhz: int | None = None
    sm_clock_busy_median_mhz: float | None = None
    mem_clock_busy_median_mhz: float | None = None
    temperature_max_c: int | None = None
    power_busy_median_w: float | None = None
    power_max_w: float | None = None
    power_limit_w: float | None = None  # enforced limit, lowest seen
    power_default_limit_w: float | None = None
    # Share of busy samples (with reasons known) in which each clock-event reason was set.
    reason_fractions: dict[str, float] = Field(default_factory=dict)
    thermal_fraction: float | None = None
    thermal_sm_clock_mhz: float | None = None  # median SM clock in those samples
    power_cap_fraction: float | None = None  # SW power cap or HW power brake
    power_cap_sm_clock_mhz: float | None = None
    power_brake_fraction: float | None = None
    hw_slowdown_fraction: float | None = None  # not explained by HW thermal slowdown or the power brake
    hw_slowdown_sm_clock_mhz: float | None = None
    pcie_gen_busy: int | None = None  # best seen while busy
    pcie_width_busy_lanes: int | None = None
    pcie_gen_max: int | None = None  # the most this GPU and system support
    pcie_width_max_lanes: int | None = None
    pcie_gen_min: int | None = None  # lowest seen at any time (idle downshift included)
    pcie_width_min_lanes: int | None = None
    ecc_corrected_delta: int | None = None  # volatile counters, after − before
    ecc_uncorrected_delta: int | None = None
    other_processes: int | None = None  # most at one time
    other_pids: tuple[int, ...] = ()
    own_pid_listed: bool | None = None  # False: NVML shows host pids (container PID namespace)


class CpuTelemetry(Frozen):
    """The CPUs the case could run on, between just before its process started and after it was reaped."""

    elapsed_s: float
    cpus_watched: int  # CPUs summed from /proc/stat (the affinity set)
    usable_cores: int
    own_cpu_s: float  # the case process and its children, plus the bench process waiting for it
    own_cores: float
    busy_cores: float  # every process on the watched CPUs
    other_load_cores: float  # busy − own
    steal_s: float
    steal_fraction: float  # stolen / (busy + stolen): of the CPU time asked for
    iowait_fraction: float  # of all CPU time on the watched CPUs
    load_avg_1m_before: float | None = None
    load_avg_1m_after: float | None = None


class Finding(Frozen):
    kind: FindingKind
    side_effect: bool  # True: the case's timings are not comparable with another machine's
    message: str


class Telemetry(Frozen):
    gpu: GpuTelemetry | None = None
    cpu: CpuTelemetry | None = None
    findings: tuple[Finding, ...] = ()


class Case(Frozen):
    """One measured configuration (e.g. one concurrency level), run in its own process."""

    name: str
    params: dict[str, Scalar]  # what distinguishes this case from its siblings
    layers: int | None = Field(None, ge=1)  # depth slice actually built (None: full depth)
    full_layers: int | None = Field(None, ge=1)
    metrics: tuple[Metric, ...] = ()
    peak_memory: PeakMemory = PeakMemory()
    startup: tuple[StartupPhase, ...] = ()
    failure: Failure | None = None  # set when no run of the case finished
    wall_s: float = Field(0.0, ge=0)
    notes: tuple[str, ...] = ()  # what this case did differently from the spec, and why (e.g. sdpa for flash)
    runs: int = Field(1, ge=1)  # independent runs merged into this case (each a fresh process)
    failed_runs: tuple[Failure, ...] = ()  # runs that failed while others finished
    telemetry: tuple[Telemetry, ...] = ()  # one per run: GPU and CPU state while it ran


def level_verdict(case: Case) -> LevelVerdict:
    """A load level's verdict from its notes. A level merged from several runs holds every run's notes: one
    invalid run makes it invalid, else one run whose gate could not run every check makes it not measured; a
    case with no verdict at all (a bench case, a damaged file) is not valid."""
    if any(n.startswith(INVALID_PREFIX) for n in case.notes):
        return "invalid"
    if any(n.startswith(NOT_MEASURED_PREFIX) for n in case.notes):
        return "not measured"
    return "valid" if VALID_NOTE in case.notes else "invalid"


class FixedVariables(Frozen):
    """Everything a fair comparison must hold equal (docs/measurement.md §1)."""

    kind: ResultKind
    model: str  # preset id or path as given
    model_config_hash: str  # sha256 of the canonical config JSON
    data: str  # "synthetic" or the dataset path
    data_hash: str | None = None
    seed: int
    precision: str
    device: str  # "cuda" or "cpu"
    warmup: int = Field(ge=0)
    repeats: int = Field(ge=0)
    layers: int | None = Field(None, ge=1)
    settings: dict[str, Scalar]  # batch, seq_len, prompt/output tokens, concurrency levels, resolution …
    region: str | None = None  # where the machine was rented: a price and the network depend on it
    billing: str | None = None  # on-demand / spot / reserved …: spot capacity can be slower or preempted
    checkpoint_hash: str | None = None  # sha256 over the checkpoint's files (names, sizes, headers)


class Fingerprint(Frozen):
    """The machine and software the numbers came from."""

    gpuscout_version: str
    python: str
    platform: str
    cpu_model: str
    cpu_cores: int = Field(ge=0)
    ram_bytes: Bytes | None = None
    disk_free_bytes: Bytes | None = None
    libraries: dict[str, str]  # torch, transformers, peft, diffusers, accelerate, bitsandbytes, …
    cuda: str | None = None
    driver: str | None = None
    gpu_name: str | None = None
    gpu_sku: str | None = None  # the catalog SKU it matched, if any
    gpu_count: int = Field(0, ge=0)
    gpu_memory_bytes: Bytes | None = None
    compute_capability: str | None = None
    sm_clock_mhz: int | None = None
    memory_clock_mhz: int | None = None
    power_limit_w: float | None = None
    pcie_generation: int | None = None
    pcie_width: int | None = None
    mig_mode: str | None = None
    ecc: bool | None = None
    topology: str | None = None


# --- Doctor (`gpuscout doctor`, docs/doctor.md): is this rented box what was paid for? ---------------

DoctorOutcome = Literal["keep", "return", "inconclusive"]
# pass: within its band · warn: below the band, within the margin · fail: clearly below it, or broken ·
# info: measured or read, nothing to judge it against · error: the check could not run (the reason says why)
DoctorStatus = Literal["pass", "warn", "fail", "info", "error"]
DoctorArea = Literal["identity", "health", "performance", "host", "network", "startup"]


class DoctorFinding(Frozen):
    """One line of the verdict: a check, what it found, and where that sits in its expected band."""

    check: str  # "pcie link", "matmul bf16 burst", "all-reduce bus bandwidth" …
    area: DoctorArea
    status: DoctorStatus
    message: str
    gpu: int | None = None  # the GPU's index, for per-GPU checks
    value: float | None = None  # SI units, as `unit` says
    unit: str = ""
    band_low: float | None = None
    band_high: float | None = None
    percentile: float | None = None  # 0 = the band's low end, 100 = its high end; < 0 below it
    source: str = ""  # where the band comes from (docs/doctor.md §3)


class MachineIdentity(Frozen):
    """What tells one rented machine from another, hashed (sha256, 16 hex digits): a bench result can
    then carry the doctor result of its own machine and refuse another's."""

    host: str | None = None  # hostname
    boot: str | None = None  # /proc/sys/kernel/random/boot_id: changes when the machine reboots
    gpus: tuple[str, ...] = ()  # NVML GPU UUIDs, in index order


class DoctorVerdict(Frozen):
    outcome: DoctorOutcome
    text: str
    findings: tuple[DoctorFinding, ...] = ()
    # what the box was held against: offer id, SKU, GPU count, memory, cores, RAM
    expected: dict[str, Scalar] = Field(default_factory=dict)
    machine: MachineIdentity = MachineIdentity()
    startup_s: float | None = Field(None, ge=0)  # creation → GPU ready, measured (pick --doctor uses it)
    startup_origin: str | None = None  # "created_at" (given) or "boot" (the machine's boot time)
    checked_at: datetime | None = None  # on a bench result: when the attached doctor result was written
    file: str | None = None  # on a bench result: the doctor result it came from


# --- The serving simulator's prediction beside a load result (`gpuscout load --job`, docs/serving_sim.md) ---


class PredictedLevel(Frozen):
    """What the serving simulator predicted for one measured load level: the same arrivals (users or rate,
    requests) at the prompt and output lengths the level measured. A level the simulator could not predict
    has no numbers and `note` says why, in one line."""

    model_config = ConfigDict(allow_inf_nan=False)

    case: str  # the measured case's name
    arrivals: str = ""  # the simulated arrivals in words, e.g. "concurrency 8, 100 requests, 512 → 128 tokens"
    prompt_tokens: float | None = Field(None, ge=0)  # mean prompt length the prediction used
    output_tokens: float | None = Field(None, ge=0)  # mean output length (measured: output tokens/s ÷ req/s)
    ttft_p50_s: float | None = Field(None, ge=0)
    ttft_p95_s: float | None = Field(None, ge=0)
    itl_p50_s: float | None = Field(None, ge=0)
    itl_p95_s: float | None = Field(None, ge=0)
    tpot_p50_s: float | None = Field(None, ge=0)
    tpot_p95_s: float | None = Field(None, ge=0)
    output_tokens_per_s: float | None = Field(None, ge=0)
    requests_per_s: float | None = Field(None, ge=0)
    stable: bool = True  # False: the simulated queue grew without bound (`note` says at what rate)
    note: str = ""  # why there is no prediction, or what limits it


class LoadPrediction(Frozen):
    """The simulator's prediction of a whole load result, made after the run from what served it: the GPU,
    the served job (model, weights, engine settings) and the step costs used. `unavailable` says in one
    line why no prediction was made (no job given, a GPU the catalog does not know …)."""

    model_config = ConfigDict(allow_inf_nan=False)

    gpu: str | None = None  # the catalog SKU of the server's GPU
    gpus: int = Field(1, ge=1)
    job: dict[str, Any] = Field(default_factory=dict)  # the served job spec as given (to re-simulate later)
    costs_source: str = ""  # where the step costs came from ("estimate: …" or "calibrated from …")
    levels: tuple[PredictedLevel, ...] = ()
    unavailable: str | None = None
    search_level: float | None = Field(None, gt=0)  # the most load meeting the SLO, by simulation
    search_note: str = ""  # the simulated search in words, or why it could not run


class BenchResult(Frozen):
    schema_version: int = SCHEMA_VERSION
    kind: ResultKind
    created_at: datetime
    name: str
    job: dict[str, Scalar | list[Scalar] | dict[str, Scalar | list[Scalar]]]  # the job spec as run
    fixed: FixedVariables
    fingerprint: Fingerprint
    cases: tuple[Case, ...]
    complete: bool = True  # False when interrupted (Ctrl-C) or some cases did not run
    notes: tuple[str, ...] = ()
    # A doctor result: its verdict. A bench result: the doctor result of the same machine (bench --doctor).
    doctor: DoctorVerdict | None = None
    # A load result: the serving simulator's prediction beside the measurement (None: not asked for).
    prediction: LoadPrediction | None = None
    quiet_defaults: ClassVar[dict[str, Any]] = {"prediction": None}


def check_samples(result: BenchResult) -> str:
    """The first measured value that no measurement can give (NaN, inf, past ±1e30, nonzero below 1e-30), or ""."""
    for case in result.cases:
        for metric in case.metrics:
            for value in (metric.value, *metric.samples):
                if not (value == 0 or MIN_MAGNITUDE <= abs(value) <= MAX_MAGNITUDE) or not math.isfinite(value):
                    return f"case {case.name[:60]!r}, metric {metric.name[:60]!r}: a value of {value:.3g}"
    return ""

