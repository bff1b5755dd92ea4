"""The whole machine: does the offer's host hold the job, and what do its disk and its data add?

For one offer and the job as laid out on it (docs/cost.md §2.14):

    vCPUs    at least one per GPU process, else excluded; fewer than processes × (1 + workers): a note
    RAM      the host needs (estimator/host.py) ≤ ram_gb, else excluded with both numbers
    disk     needs ≤ included_disk_gb + the storage items' sizes; else the missing GB are added as
             one more storage item at the offer's dearest storage price, or, with no storage price,
             the offer is excluded with the reason and the fix
    data     the dataset's pull is billed like startup (its seconds join the first segment), the source's
             egress is a line of the bill, and the job's outputs go back where the data lives through
             the offer's own egress tiers

What the sheet does not state (no ram_gb, no disk at all) is not held against the offer: the row
says what the job needs so the reader can check.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gpuscout.cost.billing import CostLine, CostOptions, JobCost, price_job
from gpuscout.cost.transfer import DataSource, Transfer, plan_transfer
from gpuscout.errors import SpecError
from gpuscout.estimator.host import HostNeeds, estimate_host
from gpuscout.frozen import Frozen
from gpuscout.hardware.currency import ExchangeRate, to_usd
from gpuscout.hardware.offers import Offer, StorageItem
from gpuscout.workload.job import Job
from gpuscout.workload.model import Model

GB = 10**9
EXTRA_DISK = "extra disk (the job needs it)"


class MachineCheck(Frozen):
    """The host side of one offer: what the job needs, what the offer has, what it adds to the bill."""


    needs: HostNeeds
    ram_gb: float | None  # the offer's host RAM, decimal GB (None: not stated)
    vcpus: float | None
    disk_gb: float | None  # included disk + storage items (None: the sheet states no disk)
    extra_disk_gb: float = 0.0  # added at `extra_disk_usd_per_gb_month` (in the offer's currency)
    extra_disk_price_per_gb_month: float | None = None
    transfer: Transfer | None = None
    returned_gb: float = 0.0  # outputs sent back to where the data lives, through the offer's egress
    excluded: str | None = None  # one line, naming the numbers
    notes: tuple[str, ...] = ()


def check_machine(job: Job, model: Model, offer: Offer, *, processes: int,
                  data: DataSource | None = None, needs: HostNeeds | None = None) -> MachineCheck:
    """Judge `offer`'s host for `job` run as `processes` GPU processes, with its data in `data`.

    `needs` is `host_needs` of the same job, when the caller already has it (`pick` judges thousands
    of offers of a few instance shapes: the needs depend on the shape, not on the offer).
    """
    if needs is None:
        needs = host_needs(job, model, processes=processes, data=data)
    disk_gb = available_disk_gb(offer)
    base = {"needs": needs, "ram_gb": offer.ram_gb, "vcpus": offer.vcpus, "disk_gb": disk_gb,
            "notes": _unstated(needs, offer, disk_gb) + _cpu_note(needs, offer)}
    reason = _cpu_exclusion(needs, offer) or _ram_exclusion(needs, offer)
    if reason is not None:
        return MachineCheck(**base, excluded=reason)
    disk = _disk_fit(needs, offer, disk_gb)
    if isinstance(disk, str):
        return MachineCheck(**base, excluded=disk)
    transfer = plan_transfer(data, offer) if data is not None and data.placed else None
    returned = needs.output_bytes / GB if transfer is not None and transfer.route != "same region" else 0.0
    return MachineCheck(**base, extra_disk_gb=disk[0], extra_disk_price_per_gb_month=disk[1], transfer=transfer,
                        returned_gb=returned)


def host_needs(job: Job, model: Model, *, processes: int, data: DataSource | None = None) -> HostNeeds:
    """The host RAM and disk `job` needs run as `processes` GPU processes, its dataset included."""
    return estimate_host(job, model, processes=processes,
                         dataset_bytes=data.dataset_gb * GB if data is not None else None)


def available_disk_gb(offer: Offer) -> float | None:
    """Included disk plus the storage the offer already bills; None when the sheet states neither."""
    if "included_disk_gb" not in offer.model_fields_set and not offer.storage:
        return None
    return offer.included_disk_gb + sum(item.size_gb for item in offer.storage)


def _unstated(needs: HostNeeds, offer: Offer, disk_gb: float | None) -> tuple[str, ...]:
    notes = []
    if offer.ram_gb is None:
        notes.append(f"host RAM not stated (the job needs {needs.ram_bytes / GB:,.0f} GB), so not checked")
    if disk_gb is None:
        notes.append(f"disk not stated (the job needs {needs.disk_bytes / GB:,.0f} GB), so not checked")
    return tuple(notes)


def _cpu_exclusion(needs: HostNeeds, offer: Offer) -> str | None:
    if offer.vcpus is not None and offer.vcpus < needs.processes:
        return f"{offer.vcpus:g} vCPUs for {needs.processes} GPU processes (one core each at least)"
    return None


def _cpu_note(needs: HostNeeds, offer: Offer) -> tuple[str, ...]:
    wanted = needs.vcpus_wanted
    if offer.vcpus is not None and needs.processes <= offer.vcpus < wanted:
        return (f"{offer.vcpus:g} vCPUs for {needs.processes} processes × (1 + {needs.workers_per_process} "
                f"DataLoader workers) = {wanted}: data loading may slow the job",)
    return ()


def _ram_exclusion(needs: HostNeeds, offer: Offer) -> str | None:
    if offer.ram_gb is None or needs.ram_bytes <= offer.ram_gb * GB:
        return None
    biggest = max(needs.ram, key=lambda t: t.bytes)
    return (f"host RAM: needs {needs.ram_bytes / GB:,.0f} GB ({biggest.name} {biggest.bytes / GB:,.0f} GB), "
            f"has {offer.ram_gb:,.0f} GB")


def _disk_fit(needs: HostNeeds, offer: Offer, disk_gb: float | None) -> tuple[float, float | None] | str:
    """(extra GB, its price per GB-month) — (0, None) when it fits or the disk is not stated — or why not."""
    need_gb = needs.disk_bytes / GB
    if disk_gb is None or need_gb <= disk_gb:
        return 0.0, None
    extra = math.ceil(need_gb - disk_gb)  # providers sell volumes in whole GB
    if not offer.storage:
        return (f"disk: needs {need_gb:,.0f} GB, has {disk_gb:,.0f} GB and no storage price to add {extra:,} GB "
                "(add an [[offer.storage]] item with its price)")
    return float(extra), max(item.price_per_gb_month for item in offer.storage)


def machine_offer(offer: Offer, check: MachineCheck) -> Offer:
    """The offer as this job uses it: the dataset pull billed in the first segment like startup, and the
    missing disk as one more storage item at the offer's dearest storage price (docs/cost.md §2.14)."""
    update: dict[str, object] = {}
    if check.transfer is not None and check.transfer.seconds:
        update["startup_s"] = offer.startup_s + check.transfer.seconds
    if check.extra_disk_gb and check.extra_disk_price_per_gb_month is not None:
        dearest = max(offer.storage, key=lambda item: item.price_per_gb_month)
        extra = StorageItem(name=EXTRA_DISK, size_gb=check.extra_disk_gb,
                            price_per_gb_month=check.extra_disk_price_per_gb_month,
                            stopped_price_per_gb_month=dearest.stopped_price_per_gb_month,
                            hours_per_month=dearest.hours_per_month)
        update["storage"] = (*offer.storage, extra)
    return offer.model_copy(update=update) if update else offer


def price_on_machine(offer: Offer, work_s: float, options: CostOptions | None, check: MachineCheck,
                     rates: Sequence[ExchangeRate] = (), *, formulas: bool = True) -> JobCost:
    """`price_job` on the machine as this job uses it, plus the dataset's egress from its source.

    The source's egress is priced in USD (docs/cost.md §2.14) and converted into the offer's currency;
    without a rate for it the line is left out, and the offer is excluded for its missing rate anyway.
    """
    opts = options or CostOptions()
    if check.returned_gb:
        opts = opts.model_copy(update={"egress_gb": opts.egress_gb + check.returned_gb})
    cost = price_job(machine_offer(offer, check), work_s, opts, formulas=formulas)
    line = _egress_line(check.transfer, offer.currency, rates)
    if line is None:
        return cost
    return cost.model_copy(update={"lines": (*cost.lines, line), "total": cost.total + line.amount,
                                   "total_p95": cost.total_p95 + line.amount})


def _egress_line(transfer: Transfer | None, currency: str, rates: Sequence[ExchangeRate]) -> CostLine | None:
    if transfer is None or not transfer.egress_usd:
        return None
    try:
        usd_per_unit = to_usd(1.0, currency, rates)
    except SpecError:
        return None
    return CostLine(name="dataset egress (at the source)", amount=transfer.egress_usd / usd_per_unit,
                    formula=f"{transfer.gb:g} GB × ${transfer.usd_per_gb:g}/GB ({transfer.basis})")
