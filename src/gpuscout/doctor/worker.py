"""One torchrun worker of `gpuscout doctor`: `python -m gpuscout.doctor.worker PLAN.json`.

Launched by `doctor.launch` through `python -m torch.distributed.run`, one worker per GPU
(NCCL) or per CPU process (gloo). Each binds its device, joins the process group, and runs in order:
matmul per dtype (and the soak), device memory bandwidth, host↔device copies one GPU at a time,
GPU-to-GPU copies pair by pair, the all-reduce sweep, and on rank 0 the checkpoint save/load. After
every check it rewrites its `RankReport` (doctor/plan.py) atomically, so the parent can draw progress
and keep what finished when the run is stopped. A check that raises is recorded as a failed case
and the worker goes on; a collective that hangs is ended by the process group's timeout or the parent.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

from gpuscout.doctor.checks import all_pairs, allreduce_checks, matmul_checks, p2p_checks, ring_pairs
from gpuscout.doctor.launch import DOCTOR_PID_ENV
from gpuscout.doctor.plan import CPU_MATMUL_N, GPU_MATMUL_N, DoctorPlan, Phase, RankReport
from gpuscout.interrupts import die_with_parent
from gpuscout.measure.harness import BenchSettings, classify_failure, failed_case
from gpuscout.measure.probes import checkpoint_case, device_bandwidth_case, host_copy_case
from gpuscout.results.schema import Case


class Worker:
    """This rank's report, rewritten after every check."""

    def __init__(self, plan: DoctorPlan, rank: int, world: int) -> None:
        self.plan, self.rank, self.world = plan, rank, world
        self.path = Path(plan.out_dir) / f"rank{rank}.json"
        self.report = RankReport(rank=rank, world=world, pid=os.getpid())

    def update(self, **changes: Any) -> None:
        self.report = self.report.model_copy(update=changes)
        partial = self.path.with_suffix(".tmp")
        partial.write_text(self.report.model_dump_json())
        os.replace(partial, self.path)

    def run(self, name: str, check: Callable[[], Case | None], *, gpu_label: bool = True) -> None:
        """Run one check, record its case (or the failure that stopped it) and its time span."""
        self.update(current=name)
        start = time.monotonic()
        begun = time.perf_counter()
        try:
            case = check()
        except Exception as exc:  # recorded, never raised: the other checks still run
            case = failed_case(name, {}, classify_failure(exc), f"{type(exc).__name__}: {exc}"[:2000],
                               time.perf_counter() - begun)
        phase = Phase(name=name, start=start, end=time.monotonic())
        if case is None:
            self.update(phases=(*self.report.phases, phase))
            return
        if gpu_label and self.report.device_index is not None:
            case = case.model_copy(update={"name": f"{case.name} · GPU {self.report.device_index}",
                                           "params": {**case.params, "gpu": self.report.device_index}})
        elif gpu_label:  # CPU workers: one case per worker, told apart by rank
            case = case.model_copy(update={"name": f"{case.name} · worker {self.rank}",
                                           "params": {**case.params, "worker": self.rank}})
        self.update(phases=(*self.report.phases, phase), cases=(*self.report.cases, case))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    plan = DoctorPlan.model_validate_json(Path(args[0]).read_text())
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    # torchrun killed (the doctor stopped) ends this worker too; so does the doctor's death, which may
    # have ended torchrun before this process got here to ask the kernel
    doctor = os.environ.get(DOCTOR_PID_ENV, "")
    die_with_parent(os.getppid(), also=int(doctor) if doctor.isdigit() else None)
    worker = Worker(plan, rank, world)
    import torch
    import torch.distributed as dist

    device, local = plan.device, int(os.environ.get("LOCAL_RANK", "0"))
    _bind_device(torch, worker, device, local)
    backend = "nccl" if device == "cuda" else "gloo"
    # device_id binds NCCL to this rank's GPU from the start (barriers need no guess of the device).
    dist.init_process_group(backend, timeout=timedelta(seconds=plan.collective_timeout_s),
                            device_id=torch.device("cuda", local) if device == "cuda" else None)
    worker.update(backend=backend, ready_at=worker.report.ready_at or time.time())
    try:
        _run_checks(torch, dist, worker, plan)
    finally:
        worker.update(current="", done=True)
        dist.destroy_process_group()
    return 0


def _bind_device(torch: Any, worker: Worker, device: str, local_rank: int) -> None:
    """Take this rank's GPU and create its context now: 'GPU ready' for the start-up check."""
    if device != "cuda":
        return
    torch.cuda.set_device(local_rank)
    torch.empty(1, device="cuda")
    torch.cuda.synchronize()
    props = torch.cuda.get_device_properties(local_rank)
    worker.update(device_index=local_rank, device_name=str(props.name), sm_count=int(props.multi_processor_count),
                  memory_bytes=int(props.total_memory), capability=f"{props.major}.{props.minor}",
                  ready_at=time.time())


def _run_checks(torch: Any, dist: Any, worker: Worker, plan: DoctorPlan) -> None:
    device, world, rank = plan.device, worker.world, worker.rank
    settings = BenchSettings(device=device, warmup=plan.warmup, repeats=plan.repeats, seed=plan.seed)
    torch.manual_seed(plan.seed + rank)
    sizes = GPU_MATMUL_N if device == "cuda" else None
    for dtype in plan.dtypes:
        soak = plan.soak_s if dtype == plan.soak_dtype else None
        worker.run(f"matmul {dtype}", partial(matmul_checks, torch, dtype, device, sizes or (CPU_MATMUL_N[dtype],),
                                              plan.burst_s, soak))
    worker.run("device memory bandwidth", lambda: device_bandwidth_case(device, settings))
    if plan.host_copies:
        for turn in range(world):  # one GPU at a time: concurrent copies would share the host's links
            dist.barrier()
            if turn == rank:
                for direction in ("h2d", "d2h"):
                    worker.run(f"host copy {direction}", partial(host_copy_case, direction, device, settings))
    dist.barrier()
    if world > 1:
        pairs = all_pairs(world) if plan.pairs == "all" else ring_pairs(world)
        worker.run("gpu-to-gpu copies", lambda: p2p_checks(torch, dist, rank, pairs, plan.p2p_bytes,
                                                           plan.p2p_repeats, device), gpu_label=False)
        worker.run("all-reduce", lambda: allreduce_checks(torch, dist, world, plan.allreduce_bytes,
                                                          plan.allreduce_repeats, device, worker.report.backend)
                   if rank == 0 else _join_allreduce(torch, dist, world, plan, device), gpu_label=False)
    dist.barrier()  # the last collective: rank 0's checkpoint below keeps no other rank waiting
    if rank == 0 and plan.checkpoint_bytes:
        worker.run("checkpoint save/load", lambda: checkpoint_case(plan.checkpoint_bytes or 0, plan.model_bytes,
                                                                   plan.folder, device, settings), gpu_label=False)


def _join_allreduce(torch: Any, dist: Any, world: int, plan: DoctorPlan, device: str) -> None:
    """The other ranks run the same collectives as rank 0 (which records them) and record nothing."""
    allreduce_checks(torch, dist, world, plan.allreduce_bytes, plan.allreduce_repeats, device, "")


if __name__ == "__main__":
    sys.exit(main())
