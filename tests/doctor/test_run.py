"""A doctor run on two GPUs, from what the workers and NVML would have recorded (no GPU needed).

The workers' reports (their cases and phase times) and the NVML samples the parent took while they
ran go through the same collection, telemetry slicing and judging a real run uses: a healthy GPU 0,
and a GPU 1 whose link trained to x8 and which throttles under the soak.
"""

from __future__ import annotations

from dataclasses import replace

from gpuscout.doctor.findings import Evidence, all_findings
from gpuscout.doctor.identity import Expected
from gpuscout.doctor.inventory import read_inventory
from gpuscout.doctor.launch import WorkerRun, own_readings, phase_readings
from gpuscout.doctor.plan import Phase, RankReport
from gpuscout.doctor.run import _collect, merge_cases
from gpuscout.doctor.verdict import decide
from gpuscout.results.schema import Case, Metric
from readings import DEGRADED_X8, THERMAL, FakeNvml, a100, nvml_gpu, run

WORKER_PIDS = (4101, 4102)


def soak_case(gpu: int, burst: float, sustained: float) -> Case:
    return Case(name=f"matmul bf16 · GPU {gpu}", params={"dtype": "bf16", "gpu": gpu, "soak_s": 60.0},
                metrics=(Metric(name="burst_flop_per_s", unit="FLOP/s", value=burst, higher_is_better=True),
                         Metric(name="sustained_flop_per_s", unit="FLOP/s", value=sustained, higher_is_better=True)))


def copy_case(gpu: int, rate: float) -> Case:
    return Case(name=f"host copy h2d · GPU {gpu}", params={"direction": "h2d", "gpu": gpu},
                metrics=(Metric(name="h2d_bytes_per_s", unit="bytes/s", value=rate, higher_is_better=True),))


def pairs_case(rank: int, rate: float) -> Case:
    other = 1 - rank
    return Case(name="gpu-to-gpu copies", params={"bytes": 1 << 28},
                metrics=(Metric(name=f"p2p_{other}_to_{rank}_bytes_per_s", unit="bytes/s", value=rate),))


def report(rank: int, cases: tuple[Case, ...]) -> RankReport:
    # The soak ran from t = 1.0 s to t = 6.0 s of the parent's sampling clock (which started at 100.0).
    return RankReport(rank=rank, world=2, pid=WORKER_PIDS[rank], device_index=rank, device_name="NVIDIA A100-SXM4-80GB",
                      sm_count=108, ready_at=1_000.0, done=True, cases=cases,
                      phases=(Phase(name="matmul bf16", start=101.0, end=106.0),))


def worker_run() -> WorkerRun:
    # 20 idle samples (t = 0 … 0.95 s), then busy ones; both GPUs list their own worker and its peer
    # (NVML shows every process with a context); GPU 1 runs at x8 throughout and throttles from t = 2.5 s.
    healthy = [replace(r, pids=WORKER_PIDS) for r in run(a100, 120)]
    sick = [replace(r, pids=WORKER_PIDS, **DEGRADED_X8) for r in run(a100, 120, episode=range(30, 120), **THERMAL)]
    reports = [report(0, (soak_case(0, 268e12, 262e12), copy_case(0, 25.5e9), pairs_case(0, 230e9))),
               report(1, (soak_case(1, 266e12, 205e12), copy_case(1, 12.4e9), pairs_case(1, 228e9)))]
    return WorkerRun(reports=reports, returncode=0, log_tail="",
                     readings={0: own_readings(healthy, reports, 0), 1: own_readings(sick, reports, 1)},
                     sampling_started={0: 100.0, 1: 100.0})


def test_the_other_workers_are_not_other_tenants_and_the_soak_is_sliced_by_its_phase() -> None:
    work = worker_run()
    assert {r.own_pid for r in work.readings[1]} == {4102}
    assert all(r.pids == (4102,) for r in work.readings[1])  # the peer worker is doctor's own, not a tenant
    soak = phase_readings(work.readings[1], 100.0, 101.0, 106.0)
    assert soak and all(1.0 <= r.t_s <= 6.0 for r in soak)


def test_a_run_with_a_degraded_throttling_gpu_is_returned_with_one_line_per_finding() -> None:
    ev = Evidence(expected=Expected(source="offer x", offer_id="x", sku="a100-sxm4-80gb", gpu_count=2), device="cuda",
                  inventory=read_inventory(FakeNvml([nvml_gpu(name="NVIDIA A100-SXM4-80GB", memory=81_920 * 2**20,
                                                              gen_max=4, gpu_gen_max=4)] * 2), kernel_log=""),
                  cores=32, ram_bytes=None)
    _collect(ev, worker_run(), 2, soak="matmul bf16", deadline_s=600)
    assert [c.name for c in ev.cases] == ["matmul bf16 · GPU 0", "host copy h2d · GPU 0", "matmul bf16 · GPU 1",
                                         "host copy h2d · GPU 1", "gpu-to-gpu copies"]
    assert ev.cases[2].telemetry and ev.cases[2].telemetry[0].gpu is not None  # the soak carries its telemetry
    findings = all_findings(ev)
    failing = {(f.check, f.gpu) for f in findings if f.status == "fail"}
    assert failing == {("pcie link", 1), ("thermal throttle", 1), ("host copy h2d", 1), ("matmul bf16 sustained", 1)}
    passing = {(f.check, f.gpu) for f in findings if f.status == "pass"}
    assert {("pcie link", 0), ("host copy h2d", 0), ("matmul bf16 burst", 0), ("gpu model", None)} <= passing
    outcome, text = decide(findings)
    assert outcome == "return" and text == ("Return it: GPU 1: thermal throttling in 70% of busy samples (SM clock "
                                            "1,410 → 1,140 MHz) up to 89 °C (and 3 more).")
    link = next(f for f in findings if f.check == "pcie link" and f.gpu == 1)
    assert link.message == "GPU 1: PCIe link gen4 x8 while busy, of the card's x16"
    copy = next(f for f in findings if f.check == "host copy h2d" and f.gpu == 1)
    assert copy.message == "host copy h2d, GPU 1: gen4 x16 link expected; 12.4 GB/s, 55% of expected (22.7–27.1 GB/s)"


def test_the_pairs_each_worker_received_become_one_case() -> None:
    merged = merge_cases(worker_run().reports)
    pairs = next(c for c in merged if c.name == "gpu-to-gpu copies")
    assert {m.name for m in pairs.metrics} == {"p2p_1_to_0_bytes_per_s", "p2p_0_to_1_bytes_per_s"}
