"""Everything the doctor saw, judged: the findings of every area, in the order the screen shows them.

`Evidence` gathers what the run collected (the inventory, the workers' reports and cases, the
telemetry under load, the host's grants); `all_findings` hands each part to the module that judges
it (identity, health, performance, host) and adds the checks that could not run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuscout.doctor.health import health_findings
from gpuscout.doctor.host import (
    checkpoint_findings,
    disk_findings,
    host_findings,
    network_findings,
    startup_findings,
)
from gpuscout.doctor.identity import Expected, gpu_sku, identity_findings
from gpuscout.doctor.inventory import Inventory
from gpuscout.doctor.performance import (
    allreduce_findings,
    bandwidth_findings,
    host_copy_findings,
    matmul_findings,
    p2p_findings,
    variant_findings,
)
from gpuscout.doctor.plan import RankReport
from gpuscout.doctor.verdict import finding
from gpuscout.hardware.catalog import Gpu, lookup_gpu
from gpuscout.results.schema import Case, DoctorFinding, DoctorStatus, GpuTelemetry


@dataclass
class Evidence:
    expected: Expected
    device: str
    inventory: Inventory = field(default_factory=lambda: Inventory(gpus=()))
    reports: list[RankReport] = field(default_factory=list)
    cases: list[Case] = field(default_factory=list)
    soak: dict[int, GpuTelemetry] = field(default_factory=dict)  # per GPU, over its matmul soak
    run: dict[int, GpuTelemetry] = field(default_factory=dict)  # per GPU, over the whole worker run
    torch_cuda: str | None = None
    cores: float = 1.0
    ram_bytes: int | None = None
    problems: list[str] = field(default_factory=list)  # steps that could not run, and why

    def case(self, name: str) -> Case | None:
        return next((c for c in self.cases if c.name == name), None)

    @property
    def sku(self) -> str | None:
        """The SKU the bands are looked up for: the offer's, else what the driver or torch reports."""
        if self.expected.sku is not None:
            return self.expected.sku
        names = [g.name for g in self.inventory.gpus] or [r.device_name for r in self.reports]
        return gpu_sku(names[0]) if names else None

    @property
    def catalog(self) -> Gpu | None:
        return lookup_gpu(self.sku) if self.sku else None


def all_findings(ev: Evidence) -> list[DoctorFinding]:
    out: list[DoctorFinding] = []
    gpu = ev.device == "cuda"
    if gpu:
        out += identity_findings(ev.expected, ev.inventory, ev.reports, ev.torch_cuda)
        out += variant_findings(ev.cases, ev.sku)
        out += health_findings(ev.inventory, ev.soak, ev.run, ev.catalog)
    elif ev.expected.sku is not None:
        out.append(finding("gpu model", "identity", "info", f"--device cpu: the GPUs of {ev.expected.source} were "
                           "not checked"))
    out += matmul_findings(ev.cases, ev.sku if gpu else None, ev.catalog if gpu else None)
    out += bandwidth_findings(ev.cases, ev.catalog if gpu else None)
    if gpu:
        out += host_copy_findings(ev.cases, ev.catalog.pcie_gen if ev.catalog else None, _system_gen(ev))
    out += p2p_findings(ev.cases, ev.sku if gpu else None, gpus=gpu)
    out += allreduce_findings(ev.cases, ev.sku if gpu else None)
    out += host_findings(ev.expected, ev.cores, ev.ram_bytes)
    out += disk_findings(ev.case("disk sequential"))
    out += checkpoint_findings(ev.case("checkpoint save/load"))
    out += network_findings(ev.case("network"))
    out += startup_findings(ev.case("start-up"), ev.expected)
    out += _failed_checks(ev)
    return out


def _system_gen(ev: Evidence) -> int | None:
    gens = [t.pcie_gen_max for t in ev.run.values() if t.pcie_gen_max is not None]
    gens += [g.pcie_gen_max for g in ev.inventory.gpus if g.pcie_gen_max is not None]
    return min(gens) if gens else None


def _failed_checks(ev: Evidence) -> list[DoctorFinding]:
    """Checks that did not finish: unsupported here is reported; a crash, timeout or interruption
    leaves the verdict open."""
    out = [finding("doctor", "performance", "error", problem) for problem in ev.problems]
    for case in ev.cases:
        if case.failure is None or case.name in ("disk sequential", "checkpoint save/load", "network"):
            continue
        status: DoctorStatus = "info" if case.failure.kind == "unsupported" else "error"
        out.append(finding(case.name, "performance", status,
                           f"{case.name}: {case.failure.kind}: {case.failure.message.splitlines()[0][:160]}"))
    return out
