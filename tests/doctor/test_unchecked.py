"""A check that could not run is never a pass: the doctor's verdict when the GPUs it is held against
were not seen, not used, or not fully read (docs/doctor.md §4). Recorded readings, no GPU needed."""

from __future__ import annotations

from datetime import UTC, datetime

from rich.console import Console

from gpuscout.doctor.findings import Evidence, all_findings
from gpuscout.doctor.identity import Expected, expected_from_gpu, identity_findings
from gpuscout.doctor.inventory import Inventory, read_inventory
from gpuscout.doctor.plan import RankReport
from gpuscout.doctor.verdict import decide, not_checked
from gpuscout.report.doctor import doctor_screen
from gpuscout.results.schema import BenchResult, DoctorVerdict, Fingerprint, FixedVariables
from readings import FakeNvml, nvml_gpu

OFFER = Expected(source="offer vast-4090 in prices.toml", offer_id="vast-4090", sku="rtx-4090", gpu_count=1)
NO_NVML = Inventory(gpus=(), xids_readable=True)  # a CPU machine: no driver, nothing listed
RTX_4090 = {"name": "NVIDIA GeForce RTX 4090", "memory": 24_564 * 2**20}


def cpu_run(expected: Expected, requested: str, inventory: Inventory = NO_NVML) -> Evidence:
    return Evidence(expected=expected, device="cpu", requested=requested, inventory=inventory, cores=2)


def test_auto_falling_back_to_the_cpu_against_an_offer_returns_the_box() -> None:
    outcome, text = decide(all_findings(cpu_run(OFFER, "auto")))
    assert outcome == "return"
    assert text == ("Return it: no GPU visible: offer vast-4090 in prices.toml promises 1 × GeForce RTX 4090 24GB; "
                    "neither torch nor the NVIDIA driver (NVML) sees one here.")


def test_auto_falling_back_to_the_cpu_against_gpu_name_returns_the_box() -> None:
    findings = all_findings(cpu_run(expected_from_gpu("rtx-4090"), "auto"))
    model = next(f for f in findings if f.check == "gpu model")
    assert model.status == "fail" and model.message.startswith("no GPU visible: --gpu rtx-4090 names GeForce RTX 4090")
    assert decide(findings)[0] == "return"


def test_an_explicit_cpu_run_against_an_offer_is_at_best_inconclusive() -> None:
    findings = all_findings(cpu_run(OFFER, "cpu"))
    assert decide(findings)[0] == "inconclusive"
    assert not_checked(findings) == ["gpu model"]
    assert not any(f.status == "pass" and f.area == "identity" for f in findings)


def test_a_driver_that_lists_gpus_torch_cannot_use_judges_identity_and_leaves_the_load_checks_open() -> None:
    inventory = read_inventory(FakeNvml([nvml_gpu(**RTX_4090)]), kernel_log="")
    findings = all_findings(cpu_run(OFFER, "auto", inventory))
    by = {f.check: f.status for f in findings}
    assert by["gpu model"] == "pass" and by["gpu count"] == "pass" and by["gpu memory"] == "pass"
    assert by["gpu checks"] == "error" and by["sm count"] == "error"
    assert decide(findings)[0] == "inconclusive"
    wrong = read_inventory(FakeNvml([nvml_gpu(name="NVIDIA GeForce RTX 3090", memory=24_576 * 2**20)]),
                           kernel_log="")
    assert decide(all_findings(cpu_run(OFFER, "auto", wrong)))[0] == "return"  # the driver shows the wrong card


def test_a_gpu_run_that_reported_no_gpu_does_not_pass_the_model_or_the_count() -> None:
    findings = identity_findings(OFFER, NO_NVML, [], "12.4")
    assert {(f.check, f.status) for f in findings} == {("gpu model", "error"), ("gpu count", "error")}
    ev = Evidence(expected=OFFER, device="cuda", inventory=NO_NVML, cores=2)
    assert decide(all_findings(ev))[0] != "keep"


def test_identity_readings_missing_for_one_gpu_are_not_checked_not_passed() -> None:
    unnamed = read_inventory(FakeNvml([nvml_gpu(name=None, memory=None)]), kernel_log="")
    report = RankReport(rank=0, world=1, pid=1, device_index=0, device_name="NVIDIA GeForce RTX 4090")
    findings = identity_findings(OFFER, unnamed, [report], None)
    by = {f.check: f.status for f in findings}
    assert by["gpu model"] == "error" and by["gpu memory"] == "error" and by["sm count"] == "error"
    assert decide(findings)[0] == "inconclusive"


def test_without_nvml_the_memory_torch_saw_is_held_against_the_offer() -> None:
    report = RankReport(rank=0, world=1, pid=1, device_index=0, device_name="NVIDIA GeForce RTX 4090", sm_count=128,
                        memory_bytes=12 * 2**30)
    by = {f.check: f.status for f in identity_findings(OFFER, NO_NVML, [report], None)}
    assert by == {"gpu model": "pass", "gpu count": "pass", "gpu memory": "fail", "sm count": "pass"}


def test_the_screen_lists_what_was_not_checked() -> None:
    findings = tuple(all_findings(cpu_run(OFFER, "cpu")))
    outcome, text = decide(findings)
    fixed = FixedVariables(kind="doctor", model="none", model_config_hash="none", data="synthetic", seed=0,
                           precision="per check", device="cpu", warmup=0, repeats=2, settings={"nproc": 2})
    result = BenchResult(kind="doctor", name="doctor", job={}, fixed=fixed,
                         created_at=datetime(2026, 12, 3, tzinfo=UTC),
                         fingerprint=Fingerprint(gpuscout_version="0", python="3", platform="linux", cpu_model="cpu",
                                                 cpu_cores=2, libraries={}), cases=(),
                         doctor=DoctorVerdict(outcome=outcome, text=text, findings=findings,
                                              expected=OFFER.recorded()))
    console = Console(width=80, record=True, color_system=None)
    console.print(doctor_screen(result, None))
    screen = console.export_text()
    assert "Not checked (1): gpu model." in screen and "INCONCLUSIVE" in screen
    assert max(len(line) for line in screen.splitlines()) <= 80
