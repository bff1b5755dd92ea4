"""The doctor's judging on recorded values at the boundary (docs/doctor.md §4): no GPU needed.

NVML readings (tests/readings.py) of a degraded link, a throttle episode, ECC errors and a renamed SKU
(a 4090 D behind a "4090" label) go through the same summaries and judges a real run uses; NVML itself
is a fake module that answers from per-GPU records.
"""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from gpuscout.doctor.health import health_findings, link_findings, load_findings, xid_findings
from gpuscout.doctor.identity import Expected, expected_from_gpu, gpu_sku, identity_findings
from gpuscout.doctor.inventory import (
    GpuInventory,
    Inventory,
    different_machine,
    machine_identity,
    parse_xids,
    read_inventory,
)
from gpuscout.doctor.performance import (
    allreduce_findings,
    host_copy_findings,
    matmul_findings,
    p2p_findings,
    variant_findings,
)
from gpuscout.doctor.plan import RankReport
from gpuscout.doctor.verdict import EXIT_CODES, decide, judge, position
from gpuscout.hardware.bands import band_for, host_copy_band
from gpuscout.measure.gpu_telemetry import summarize_gpu
from gpuscout.results.schema import Case, DoctorFinding, MachineIdentity, Metric
from readings import DEGRADED_X8, KERNEL_LOG, STUCK_GEN1, THERMAL, FakeNvml, a100, h100, nvml_gpu, rtx4090, run


def statuses(findings: list[DoctorFinding]) -> dict[str, str]:
    return {f.check: f.status for f in findings}


def matmul_case(gpu: int, burst: float, sustained: float | None = None, dtype: str = "bf16") -> Case:
    metrics = [Metric(name="burst_flop_per_s", unit="FLOP/s", value=burst, higher_is_better=True)]
    if sustained is not None:
        metrics.append(Metric(name="sustained_flop_per_s", unit="FLOP/s", value=sustained, higher_is_better=True))
    return Case(name=f"matmul {dtype} · GPU {gpu}", params={"dtype": dtype, "gpu": gpu}, metrics=tuple(metrics))


# --- the band arithmetic and the verdict ----------------------------------------------------------------

def test_a_band_spans_its_published_measurements_less_the_spread_seen_on_one_node() -> None:
    band = band_for("matmul_bf16", "h100-sxm5-80gb")
    assert band is not None
    assert band.high == pytest.approx(794.5e12) and band.low == pytest.approx(789.24e12 * 0.95)
    assert position(band.low, band.low, band.high) == 0 and position(band.high, band.low, band.high) == 100
    assert position(band.low * 0.9, band.low, band.high) < 0


def test_judging_passes_warns_and_fails_at_the_band_edges() -> None:
    band = band_for("matmul_bf16", "h100-sxm5-80gb")
    assert band is not None
    assert judge("m", "performance", band.low, "FLOP/s", band).status == "pass"
    assert judge("m", "performance", band.low * 0.95, "FLOP/s", band).status == "warn"
    low = judge("m", "performance", band.low * 0.85, "FLOP/s", band, gpu=2)
    assert low.status == "fail" and low.percentile is not None and low.percentile < 0
    assert low.message == "m, GPU 2: 637 TFLOP/s, 85% of expected (750–794 TFLOP/s)"


def test_the_outcome_is_return_on_any_failure_inconclusive_on_doubt_and_keep_otherwise() -> None:
    ok = DoctorFinding(check="a", area="host", status="pass", message="fine")
    note = DoctorFinding(check="b", area="host", status="info", message="a reading")
    doubt = DoctorFinding(check="c", area="host", status="warn", message="a bit low")
    broken = DoctorFinding(check="d", area="health", status="fail", message="XID 79")
    assert decide([ok, note])[0] == "keep"
    assert decide([ok, doubt])[0] == "inconclusive"
    assert decide([ok, doubt, broken]) == ("return", "Return it: XID 79.")
    assert decide([note])[0] == "inconclusive"  # nothing judged: no grounds to keep
    assert EXIT_CODES == {"keep": 0, "return": 3, "inconclusive": 4}


# --- a degraded link ------------------------------------------------------------------------------------

def test_a_card_running_at_x8_of_x16_is_a_failed_link_and_slow_host_copies() -> None:
    telemetry = summarize_gpu(run(rtx4090, 100, **DEGRADED_X8))
    link = link_findings(GpuInventory(index=0, pcie_gen_max=4, pcie_width_max=8), telemetry, None)
    assert [f.status for f in link] == ["fail"]
    assert link[0].message == "GPU 0: PCIe link gen4 x8 while busy, of the card's x16"
    copies = Case(name="host copy h2d · GPU 0", params={"direction": "h2d", "gpu": 0},
                  metrics=(Metric(name="h2d_bytes_per_s", unit="bytes/s", value=12.2e9),))
    [copy] = host_copy_findings([copies], 4, 4)
    assert copy.status == "fail"
    assert copy.message == "host copy h2d, GPU 0: gen4 x16 link expected; 12.2 GB/s, 54% of expected (22.7–27.1 GB/s)"


def test_a_link_that_never_trained_up_fails_and_a_gen5_card_in_a_gen4_slot_is_a_warning() -> None:
    from gpuscout.hardware.catalog import find_gpu

    stuck = summarize_gpu(run(rtx4090, 50, **STUCK_GEN1))
    assert link_findings(GpuInventory(index=1), stuck, find_gpu("rtx-4090"))[0].status == "fail"
    slot = summarize_gpu([replace(r, pcie_gen_max=4) for r in run(h100, 50, pcie_gen=4)])
    [warn] = link_findings(GpuInventory(index=0), slot, find_gpu("h100-sxm5-80gb"))
    assert warn.status == "warn" and "a gen5 card in a gen4 slot" in warn.message
    healthy = summarize_gpu(run(h100, 50))
    assert link_findings(GpuInventory(index=0), healthy, find_gpu("h100-sxm5-80gb"))[0].status == "pass"


def test_host_copy_bands_scale_with_the_link() -> None:
    assert host_copy_band(4, 16) is not None and host_copy_band(4, 16)[1] == 1.0  # type: ignore[index]
    assert host_copy_band(4, 8)[1] == 0.5  # type: ignore[index]
    band, factor = host_copy_band(3, 16)  # type: ignore[misc]
    assert band.pcie_gen == 4 and factor == 0.5  # gen3 lanes carry half of gen4's (NCCL's lane table)
    assert host_copy_band(5, 16)[0].pcie_gen == 5  # type: ignore[index]


# --- a throttle episode -----------------------------------------------------------------------------------

def test_a_thermal_throttle_episode_under_load_fails_the_gpu() -> None:
    soak = summarize_gpu(run(a100, 100, episode=range(40, 90), **THERMAL))
    found = load_findings(3, soak)
    assert statuses(found)["thermal throttle"] == "fail"
    throttle = next(f for f in found if f.check == "thermal throttle")
    assert throttle.message == ("GPU 3: thermal throttling in 50% of busy samples (SM clock 1,410 → 1,140 MHz) "
                                "up to 89 °C")
    assert found[0].message.startswith("GPU 3 under load: up to 89 °C, 355 W median of a 400 W limit")


def test_the_normal_power_cap_of_a_geforce_card_is_reported_not_failed() -> None:
    found = load_findings(0, summarize_gpu(run(rtx4090, 100)))
    assert statuses(found).get("power cap") == "info"
    assert not [f for f in found if f.status == "fail"]


def test_a_sustained_rate_well_under_the_burst_is_a_warning() -> None:
    found = matmul_findings([matmul_case(0, 790e12, 600e12)], "h100-sxm5-80gb", None)
    assert statuses(found) == {"matmul bf16 burst": "pass", "matmul bf16 sustained": "fail",
                               "matmul bf16 soak": "warn"}


def test_a_straggler_among_eight_gpus_is_named() -> None:
    cases = [matmul_case(i, 790e12) for i in range(7)] + [matmul_case(7, 690e12)]
    slow = [f for f in matmul_findings(cases, "h100-sxm5-80gb", None) if f.check.endswith("straggler")]
    assert [f.gpu for f in slow] == [7] and "13% under the other GPUs' median" in slow[0].message


# --- ECC errors and the rest of the health counters --------------------------------------------------------

def test_ecc_errors_retired_pages_and_remaps_read_from_nvml_are_judged() -> None:
    nvml = FakeNvml([nvml_gpu(), nvml_gpu(volatile_uncorrected=2), nvml_gpu(aggregate_uncorrected=5),
                     nvml_gpu(remapped=(0, 1, 0, 1)), nvml_gpu(retired_pending=1, retired_dbe=[1, 2]),
                     nvml_gpu(remapped=(3, 0, 1, 0))])
    inventory = read_inventory(nvml, kernel_log="")
    assert inventory.driver == "550.54.15" and inventory.cuda_driver == "12.4" and len(inventory.gpus) == 6
    assert inventory.gpus[3].remapped_rows_uncorrectable == 1 and inventory.gpus[3].remap_failed is True
    by_gpu: dict[int, dict[str, str]] = {}
    for f in health_findings(inventory, {}, {}, None):
        if f.gpu is not None:
            by_gpu.setdefault(f.gpu, {})[f.check] = f.status
    assert by_gpu[0] == {"ecc": "pass"}
    assert by_gpu[1] == {"ecc": "fail"}
    assert by_gpu[2] == {"ecc": "warn"}
    assert by_gpu[3]["row remapping"] == "fail"
    assert by_gpu[4]["retired pages"] == "fail"
    assert by_gpu[5]["row remapping"] == "warn"


def test_a_geforce_card_without_ecc_is_reported_not_judged() -> None:
    inventory = read_inventory(FakeNvml([nvml_gpu(name="NVIDIA GeForce RTX 4090", ecc_mode=None,
                                                  volatile_corrected=None, volatile_uncorrected=None,
                                                  aggregate_corrected=None, aggregate_uncorrected=None)]),
                               kernel_log="")
    [ecc] = [f for f in health_findings(inventory, {}, {}, None) if f.check == "ecc"]
    assert ecc.status == "info"


def test_xid_errors_from_the_kernel_log_are_judged_by_what_they_mean() -> None:
    xids, readable, _ = parse_xids(KERNEL_LOG)
    assert readable and [x.code for x in xids] == [13, 79, 79, 63]
    found = {f.message.split(" ×")[0]: f for f in xid_findings(Inventory(gpus=(), xids=xids, xids_readable=True))}
    assert found["XID 79"].status == "fail" and "XID 79 × 2 since boot on 0000:2a:00" in found["XID 79"].message
    assert (found["XID 13"].status, found["XID 63"].status) == ("info", "warn")  # an application's; a remap
    unreadable = xid_findings(Inventory(gpus=(), xids_readable=False, xid_note="dmesg refused"))
    assert unreadable[0].status == "info" and "not checked" in unreadable[0].message


# --- identity: a renamed SKU -------------------------------------------------------------------------------

def test_a_4090_d_reported_by_the_driver_is_not_the_4090_the_offer_sold() -> None:
    expected = expected_from_gpu("rtx-4090")
    inventory = read_inventory(FakeNvml([nvml_gpu(name="NVIDIA GeForce RTX 4090 D", memory=24_564 * 2**20)]),
                               kernel_log="")
    found = identity_findings(expected, inventory, [], None)
    model = next(f for f in found if f.check == "gpu model")
    assert model.status == "fail"
    assert model.message == ("GPU 0 is GeForce RTX 4090 D 24GB (China market); --gpu rtx-4090 is for "
                             "GeForce RTX 4090 24GB")


def test_a_4090_d_behind_a_4090_label_is_told_apart_by_sm_count_and_throughput() -> None:
    expected = expected_from_gpu("4090")
    report = RankReport(rank=0, world=1, pid=1, device_index=0, device_name="NVIDIA GeForce RTX 4090", sm_count=114)
    inventory = read_inventory(FakeNvml([nvml_gpu(name="NVIDIA GeForce RTX 4090", memory=24_564 * 2**20)]),
                               kernel_log="")
    sm = next(f for f in identity_findings(expected, inventory, [report], None) if f.check == "sm count")
    assert sm.status == "fail" and sm.message == "GPU 0: 114 SMs; a GeForce RTX 4090 24GB has 128"
    [variant] = variant_findings([matmul_case(0, 148e12)], "rtx-4090")
    assert variant.status == "fail" and variant.message.startswith("bf16 burst 148 TFLOP/s fits a GeForce RTX 4090 D")
    [genuine] = variant_findings([matmul_case(0, 165e12)], "rtx-4090")
    assert genuine.status == "pass"


def test_a_5090_d_is_recognised_by_name_and_by_its_throughput() -> None:
    assert gpu_sku("NVIDIA GeForce RTX 5090 D") == "rtx-5090d" and gpu_sku("NVIDIA GeForce RTX 5090") == "rtx-5090"
    [variant] = variant_findings([matmul_case(0, 216e12)], "rtx-5090")
    assert variant.status == "fail" and "GeForce RTX 5090 D" in variant.message


def test_count_memory_mig_and_other_tenants_against_the_offer() -> None:
    expected = Expected(source="offer x", offer_id="x", sku="h100-sxm5-80gb", gpu_count=8)
    gpus = [nvml_gpu() for _ in range(7)]
    gpus[1] = nvml_gpu(memory=40 * 2**30)  # a slice, not the 80 GB board
    gpus[2] = nvml_gpu(mig=(1, 1))
    gpus[3] = nvml_gpu(pids=[999_999_999])  # no such process here: another container's
    gpus[4] = nvml_gpu(pids=[os.getpid()])  # this machine's own
    found = identity_findings(expected, read_inventory(FakeNvml(gpus), kernel_log=""), [], "12.8")
    by = {(f.check, f.gpu): f.status for f in found}
    assert by[("gpu count", None)] == "fail"
    assert by[("gpu memory", 1)] == "fail" and by[("gpu memory", 0)] == "pass"
    assert by[("mig mode", 2)] == "fail"
    assert by[("other processes", 3)] == "fail" and by[("other processes", 4)] == "warn"
    assert by[("driver", None)] == "warn"  # CUDA 12.8 runtime on a 12.4 driver


# --- GPU pairs, all-reduce ---------------------------------------------------------------------------------

def pair_case(rates: dict[tuple[int, int], float]) -> Case:
    return Case(name="gpu-to-gpu copies", params={"bytes": 1},
                metrics=tuple(Metric(name=f"p2p_{s}_to_{d}_bytes_per_s", unit="bytes/s", value=v)
                              for (s, d), v in rates.items()))


def test_a_pair_at_half_the_others_is_a_link_fault() -> None:
    rates = {(s, d): 375e9 for s in range(4) for d in range(4) if s != d} | {(2, 3): 150e9}
    found = p2p_findings([pair_case(rates)], "h100-sxm5-80gb", gpus=True)
    assert statuses(found) == {"gpu pair": "fail", "gpu-to-gpu copies": "fail"}
    assert found[0].message.startswith("GPU pair 2→3: 150 GB/s, 40% of the median pair (375 GB/s)")
    healthy = p2p_findings([pair_case({k: 375e9 for k in rates})], "h100-sxm5-80gb", gpus=True)
    assert statuses(healthy) == {"gpu-to-gpu copies": "pass"}


def allreduce_case(busbw: float, world: int = 8, wrong: float = 0.0) -> Case:
    return Case(name="all-reduce", params={"world_size": world, "backend": "nccl"},
                metrics=(Metric(name="busbw_2147483648_bytes_per_s", unit="bytes/s", value=busbw),
                         Metric(name="wrong_elements", unit="elements", value=wrong)))


def test_all_reduce_bus_bandwidth_is_held_against_8_gpu_nccl_measurements() -> None:
    [ok] = allreduce_findings([allreduce_case(450e9)], "h100-sxm5-80gb")
    assert ok.status == "pass" and ok.percentile == pytest.approx(72.7, abs=0.1)
    [half] = allreduce_findings([allreduce_case(240e9)], "h100-sxm5-80gb")
    assert half.status == "fail" and "65% of expected (370–480 GB/s)" in half.message
    [four] = allreduce_findings([allreduce_case(240e9, world=4)], "h100-sxm5-80gb")
    assert four.status == "info"  # no band was published for 4 GPUs
    wrong = allreduce_findings([allreduce_case(450e9, wrong=12)], "h100-sxm5-80gb")
    assert statuses(wrong)["all-reduce result"] == "fail"


# --- the machine's identity -------------------------------------------------------------------------------

def test_a_doctor_result_belongs_to_the_machine_with_its_gpus_or_its_host_and_boot() -> None:
    here = machine_identity(("GPU-a", "GPU-b"))
    assert different_machine(here, here) == ""
    assert different_machine(machine_identity(("GPU-a", "GPU-b", "GPU-c")), machine_identity(("GPU-a",))) == ""
    assert "GPUs differ" in different_machine(machine_identity(("GPU-x",)), here)
    cpu = machine_identity()
    assert different_machine(cpu, cpu) == ""
    assert different_machine(MachineIdentity(host="0" * 16, boot=cpu.boot), cpu) == "it was written on another host"
    assert "rebooted" in different_machine(MachineIdentity(host=cpu.host, boot="0" * 16), cpu)
