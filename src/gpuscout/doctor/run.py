"""`gpuscout doctor`: in the first minutes of a rental, is this box what was paid for? (docs/doctor.md)

The run, in order, each step a case (or findings) of one `BenchResult` of kind "doctor":

    inventory   NVML: the GPUs, driver, MIG, ECC, retired pages, remapped rows, processes; the XID log
    disk        sequential write and read in the working folder (this process; no torch)
    workers     torchrun, one worker per GPU (NCCL) or CPU process (gloo): matmul burst and soak,
                device bandwidth, host↔device copies, the GPU-to-GPU matrix, all-reduce, checkpoint;
                NVML sampled meanwhile for throttling, temperature, power and the link under load
    network     round trip and download to a URL, when one is given (a callback: `loadgen` owns it)
    start-up    creation (or a fresh boot) → the first device ready

then every finding, judged against the offer and the expected bands, and the verdict. Ctrl-C
(KeyboardInterrupt, also SIGTERM and SIGHUP under `interrupts.stop_on_signals`) stops the step in
flight; what finished is judged and returned with `complete=False`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import Field

from gpuscout.doctor.findings import Evidence, all_findings
from gpuscout.doctor.host import granted_cores, granted_ram_bytes, startup_case
from gpuscout.doctor.identity import Expected
from gpuscout.doctor.inventory import machine_identity, read_inventory
from gpuscout.doctor.launch import WorkerRun, phase_readings, run_workers
from gpuscout.doctor.plan import DoctorPlan, RankReport, doctor_plan
from gpuscout.doctor.verdict import decide
from gpuscout.errors import SpecError
from gpuscout.frozen import Frozen
from gpuscout.hardware.catalog import available_dtypes
from gpuscout.host import usable_cores
from gpuscout.measure.fingerprint import collect_fingerprint
from gpuscout.measure.gpu_telemetry import summarize_gpu
from gpuscout.measure.harness import BenchSettings, failed_case, resolve_device
from gpuscout.measure.probes import CHECKPOINT_DEFAULT_BYTES, DISK_BYTES, checkpoint_size, disk_case
from gpuscout.measure.progress import StepProgress, progress_for
from gpuscout.measure.telemetry import build_telemetry
from gpuscout.results.schema import BenchResult, Case, DoctorVerdict, FixedVariables, Scalar

GPU_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")
CPU_DTYPES = ("fp32", "bf16", "fp16")  # tf32 and fp8 are tensor-core modes: CUDA only
QUICK_CHECKPOINT_CAP = {"cuda": 1 << 30, "cpu": 32 << 20}
QUICK_DISK_BYTES = {"cuda": 256 << 20, "cpu": 32 << 20}
# The workers' deadline: --quick is meant to finish within 60 s and the default within 5 minutes on
# 8 GPUs; past twice that something hangs (a collective waiting on a dead rank) and is ended.
DEADLINE_S = {True: 150.0, False: 600.0}
BANDS_NOTE = ("doctor: expected bands from gpuscout/hardware/expected_bands.toml, each with its sources "
              "(docs/doctor.md §3)")


class DoctorOptions(Frozen):
    device: str = "auto"
    nproc: int | None = Field(None, ge=1)
    quick: bool = False
    created_at: float | None = None  # epoch seconds the machine was created
    model_bytes: int | None = Field(None, ge=1)  # the job's weights: the checkpoint check's size
    folder: str | None = None  # where the disk and checkpoint checks write (default: the working folder)
    seed: int = 0
    url: str | None = None  # the network target, as recorded (credentials removed)


def run_doctor(options: DoctorOptions, expected: Expected, *, network: Callable[[], Case] | None = None,
               progress: StepProgress | None = None, checkpoint: Callable[[BenchResult], None] | None = None,
               ) -> BenchResult:
    """Check this machine; never raises for a failed check (user errors in the options do raise)."""
    device = resolve_device(options.device)
    nproc = worker_count(device, options.nproc)
    fingerprint = collect_fingerprint(device)
    started = datetime.now(UTC)
    ev = Evidence(expected=expected, device=device, requested=options.device, torch_cuda=fingerprint.cuda,
                  cores=granted_cores(), ram_bytes=granted_ram_bytes())
    nvml = _open_nvml(device)
    ev.inventory = read_inventory(nvml)
    if device == "cpu" and expected.sku is not None:  # promised a GPU, running on the CPU: does the driver see one?
        ev.inventory = read_inventory(_open_nvml("cuda"))
    folder = options.folder or os.getcwd()
    stopped: list[str] = []

    def result(complete: bool) -> BenchResult:
        return _result(options, device, nproc, ev, fingerprint, started, complete, stopped)

    names = ["disk", "workers", *(["network"] if network is not None else [])]
    with progress_for(progress)(len(names)) as advance:
        steps: dict[str, Callable[[], None]] = {
            "disk": lambda: ev.cases.append(_disk(device, options.quick, folder)),
            "workers": lambda: _workers(ev, options, device, nproc, folder, nvml, advance),
            "network": lambda: ev.cases.append(network()) if network is not None else None,
        }
        for name in names:
            step = steps[name]
            ran = False
            try:
                advance(name, False)
                step()
                ran = True
                advance(name, True)
                if checkpoint is not None:
                    checkpoint(result(False))  # a signal during its write acts once the file is whole
            except KeyboardInterrupt:
                stopped.append(f"after the {name} step" if ran else f"during the {name} step")
                if not ran:
                    ev.cases.append(failed_case(name, {}, "interrupted", f"stopped while the {name} step ran", 0.0))
                break
    startup = startup_case(options.created_at, min((r.ready_at for r in ev.reports if r.ready_at), default=None))
    if startup is not None:
        ev.cases.append(startup)
    return result(not stopped)


def worker_count(device: str, nproc: int | None) -> int:
    """One worker per GPU by default (two CPU processes on the CPU); never more than there are devices."""
    present = _gpu_count() if device == "cuda" else usable_cores()
    what = "GPUs torch sees (CUDA_VISIBLE_DEVICES applies)" if device == "cuda" else "CPU cores this process may use"
    count = nproc if nproc is not None else (present if device == "cuda" else min(2, present))
    if count > present:
        raise SpecError(f"--nproc {count}, but this machine has {present} {what}.",
                        "doctor runs one worker per device, the way a multi-GPU job is launched.",
                        f"Pass --nproc {present} or fewer (or leave it out: one worker per "
                        f"{'GPU' if device == 'cuda' else 'core, up to two'}).")
    return count


def _gpu_count() -> int:
    import torch

    return int(torch.cuda.device_count())


def _open_nvml(device: str) -> Any | None:
    if device != "cuda":
        return None
    from gpuscout.measure.peak_memory import open_nvml

    return open_nvml()


def _disk(device: str, quick: bool, folder: str) -> Case:
    size = (QUICK_DISK_BYTES if quick else DISK_BYTES)[device]
    settings = BenchSettings(device=device, warmup=0 if quick else 1, repeats=2 if quick else 3)
    try:
        case = disk_case(size, folder, settings)
    except Exception as exc:  # no space, a read-only folder: the check fails, the rest goes on
        return failed_case("disk sequential", {"bytes": size}, "unsupported", f"{type(exc).__name__}: {exc}", 0.0)
    return case.model_copy(update={"params": {"bytes": size}})  # the folder stays out: it is no fixed variable


def _plan(options: DoctorOptions, device: str, folder: str, work: str, ev: Evidence) -> DoctorPlan:
    catalog = ev.catalog if device == "cuda" else None
    soak = (available_dtypes(catalog) or ("bf16",))[0] if catalog is not None else "bf16"
    dtypes = (soak,) if options.quick else (GPU_DTYPES if device == "cuda" else CPU_DTYPES)
    size = checkpoint_size(device, options.model_bytes) if options.model_bytes else CHECKPOINT_DEFAULT_BYTES[device]
    if options.quick:
        size = min(size, QUICK_CHECKPOINT_CAP[device])
    return doctor_plan(device, work, quick=options.quick, dtypes=dtypes, soak_dtype=soak, checkpoint_bytes=size,
                       model_bytes=options.model_bytes, folder=folder, seed=options.seed)


def _workers(ev: Evidence, options: DoctorOptions, device: str, nproc: int, folder: str, nvml: Any | None,
             advance: Callable[[str, bool], None]) -> None:
    work = tempfile.mkdtemp(prefix="gpuscout-doctor-")
    try:
        plan = _plan(options, device, folder, work, ev)
        handles = _handles(nvml, nproc) if nvml is not None else {}
        try:
            run = run_workers(plan, nproc, deadline_s=DEADLINE_S[options.quick], nvml=nvml, handles=handles,
                              on_progress=lambda text: advance(f"workers: {text}", False))
        except KeyboardInterrupt:
            _collect_partial(ev, work, nproc)
            raise
        _collect(ev, run, nproc, soak=f"matmul {plan.soak_dtype}", deadline_s=DEADLINE_S[options.quick])
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _handles(nvml: Any, nproc: int) -> dict[int, Any]:
    """NVML handles of the GPUs the workers use: torch's index i is the i-th of CUDA_VISIBLE_DEVICES."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    order = [int(v) for v in visible.split(",") if v.strip().isdigit()] if visible else list(range(nproc))
    handles = {}
    for torch_index, nvml_index in enumerate(order[:nproc]):
        try:
            handles[torch_index] = nvml.nvmlDeviceGetHandleByIndex(nvml_index)
        except Exception:  # NVMLError: that GPU goes unwatched, its checks still run
            continue
    return handles


def _collect_partial(ev: Evidence, work: str, nproc: int) -> None:
    from gpuscout.doctor.launch import read_reports

    ev.reports = read_reports(Path(work), nproc)
    ev.cases += merge_cases(ev.reports)


def _collect(ev: Evidence, run: WorkerRun, nproc: int, *, soak: str, deadline_s: float) -> None:
    ev.reports = run.reports
    cases = merge_cases(run.reports)
    for index, readings in run.readings.items():
        if not readings:
            continue
        ev.run[index] = summarize_gpu(readings)
        report = next((r for r in run.reports if r.device_index == index), None)
        soaked = _soak_readings(report, soak, readings, run.sampling_started.get(index))
        if soaked:
            ev.soak[index] = summarize_gpu(soaked)
            cases = [_with_telemetry(c, index, ev.soak[index]) for c in cases]
    ev.cases += cases
    if run.timed_out:
        ev.problems.append(f"the workers were stopped after {deadline_s:g} s: "
                           "a check hung (see the cases that are missing)")
    elif run.returncode not in (0, None) or len(run.reports) < nproc or not all(r.done for r in run.reports):
        last = run.log_tail.strip().splitlines()[-1:] or ["no output"]
        ev.problems.append(f"the workers exited with code {run.returncode} before finishing "
                           f"({len(run.reports)} of {nproc} reported): {last[0][:160]}")


def _soak_readings(report: RankReport | None, soak: str, readings: list[Any], t0: float | None) -> list[Any]:
    """The samples of one GPU taken while its worker ran the soak."""
    phase = next((p for p in report.phases if p.name == soak), None) if report is not None else None
    if phase is None or t0 is None:
        return []
    return phase_readings(readings, t0, phase.start, phase.end)


def _with_telemetry(case: Case, index: int, gpu: Any) -> Case:
    if case.params.get("gpu") != index or not case.name.startswith("matmul") or "soak_s" not in case.params:
        return case
    return case.model_copy(update={"telemetry": (build_telemetry(gpu, None),)})


def merge_cases(reports: list[RankReport]) -> list[Case]:
    """Every worker's cases in rank order; the pairs each rank received become one GPU-to-GPU case."""
    cases: list[Case] = []
    pairs: list[Case] = []
    for report in sorted(reports, key=lambda r: r.rank):
        for case in report.cases:
            (pairs if case.name == "gpu-to-gpu copies" else cases).append(case)
    if pairs:
        metrics = tuple(m for c in pairs for m in c.metrics)
        failure = next((c.failure for c in pairs if c.failure is not None), None)
        cases.append(pairs[0].model_copy(update={"metrics": metrics, "failure": failure if not metrics else None,
                                                 "wall_s": max(c.wall_s for c in pairs)}))
    return cases


def _result(options: DoctorOptions, device: str, nproc: int, ev: Evidence, fingerprint: Any, started: datetime,
            complete: bool, stopped: list[str]) -> BenchResult:
    findings = all_findings(ev)
    if stopped:
        from gpuscout.doctor.verdict import finding

        findings.append(finding("doctor", "performance", "error", f"interrupted {stopped[0]}: "
                                "the checks after it did not run"))
    outcome, text = decide(findings)
    startup = ev.case("start-up")
    verdict = DoctorVerdict(outcome=outcome, text=text, findings=tuple(findings), expected=ev.expected.recorded(),
                            machine=machine_identity(tuple(g.uuid for g in ev.inventory.gpus)),
                            startup_s=startup.metrics[0].value if startup else None,
                            startup_origin=str(startup.params["origin"]) if startup else None)
    return BenchResult(kind="doctor", created_at=started, name="doctor" + (" --quick" if options.quick else ""), job={},
                       fixed=_fixed(options, device, nproc), fingerprint=fingerprint, cases=tuple(ev.cases),
                       complete=complete, notes=(BANDS_NOTE,), doctor=verdict)


def _fixed(options: DoctorOptions, device: str, nproc: int) -> FixedVariables:
    settings: dict[str, Scalar] = {"quick": options.quick, "nproc": nproc, "url": options.url}
    return FixedVariables(kind="doctor", model="none", model_config_hash="none", data="synthetic", seed=options.seed,
                          precision="per check", device=device, warmup=0 if options.quick else 1,
                          repeats=2 if options.quick else 5, settings=settings)
