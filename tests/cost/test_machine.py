"""The whole machine: host RAM, vCPUs and disk against the offer, and the dataset's transfer, by hand."""

from __future__ import annotations

from datetime import date
from typing import Any

import pytest

from gpuscout.cost.billing import CostOptions, price_job
from gpuscout.cost.machine import EXTRA_DISK, available_disk_gb, check_machine, machine_offer, price_on_machine
from gpuscout.cost.pick import pick
from gpuscout.cost.transfer import DataSource, cloud_key, continent, data_source, plan_transfer
from gpuscout.errors import SpecError
from gpuscout.hardware.currency import ExchangeRate
from gpuscout.hardware.offers import Offer
from gpuscout.workload.job import FinetuneJob
from gpuscout.workload.shape import ModelShape

TODAY = date(2026, 11, 30)
P8B = 8_030_261_248
LORA16 = 41_943_040  # tests/estimator/test_host.py counts it by hand
LORA = FinetuneJob(kind="finetune", model="llama-3-8b", method="lora")
OFFLOAD = FinetuneJob(kind="finetune", model="llama-3-8b", method="full", optimizer_offload=True)
# The LoRA job's disk: environment 20 GB + 16-bit weights + 10M tokens × 20 B + fp32 adapters.
LORA_DISK = 20 * 10**9 + P8B * 2 + 10_000_000 * 20 + LORA16 * 4


def offer(**kw: Any) -> Offer:
    base: dict[str, Any] = {"id": "o", "provider": "AWS", "region": "us-east-1", "gpu": "h100", "gpu_count": 1,
                            "price": 10.0, "price_basis": "instance", "currency": "USD", "observed_at": TODAY,
                            "source": "test", "ram_gb": 200, "vcpus": 16, "included_disk_gb": 1000}
    return Offer.model_validate(base | kw)


def test_too_little_host_ram_is_excluded_with_the_numbers(llama8b: ModelShape) -> None:
    check = check_machine(OFFLOAD, llama8b, offer(ram_gb=125), processes=1)
    # 24 B/param (16 offloaded + 8 pinned) + 6 GiB of processes and workers = 199.2 GB.
    assert check.needs.ram_bytes == 24 * P8B + 6 * 2**30
    assert check.excluded == "host RAM: needs 199 GB (offloaded optimizer states 128 GB), has 125 GB"
    assert check_machine(OFFLOAD, llama8b, offer(ram_gb=250), processes=1).excluded is None


def test_fewer_vcpus_than_gpu_processes_is_excluded_and_few_workers_noted(llama8b: ModelShape) -> None:
    job = LORA.model_copy(update={"gpus": 8})
    assert check_machine(job, llama8b, offer(vcpus=4, gpu_count=8), processes=8).excluded == \
        "4 vCPUs for 8 GPU processes (one core each at least)"
    noted = check_machine(job, llama8b, offer(vcpus=16, gpu_count=8, ram_gb=2000), processes=8)
    assert noted.excluded is None
    assert noted.notes == ("16 vCPUs for 8 processes × (1 + 2 DataLoader workers) = 24: data loading may slow "
                           "the job",)


def test_too_little_disk_without_a_storage_price_is_excluded_with_the_fix(llama8b: ModelShape) -> None:
    check = check_machine(LORA, llama8b, offer(included_disk_gb=30), processes=1)
    assert check.needs.disk_bytes == LORA_DISK  # 36.43 GB
    assert check.excluded == ("disk: needs 36 GB, has 30 GB and no storage price to add 7 GB "
                              "(add an [[offer.storage]] item with its price)")


def test_missing_disk_is_added_at_the_offers_dearest_storage_price(llama8b: ModelShape) -> None:
    storage = [{"name": "root", "size_gb": 20, "price_per_gb_month": 0.08},
               {"name": "volume", "size_gb": 10, "price_per_gb_month": 0.10}]
    sheet_offer = offer(storage=storage, included_disk_gb=0)
    check = check_machine(LORA, llama8b, sheet_offer, processes=1)
    assert check.excluded is None
    assert (check.extra_disk_gb, check.extra_disk_price_per_gb_month) == (7.0, 0.10)  # ceil(36.43 − 30)
    bill = price_on_machine(sheet_offer, 3600.0, None, check)
    extra = next(line for line in bill.lines if line.name == f"storage: {EXTRA_DISK}")
    assert extra.amount == pytest.approx(7 * 0.10 * 1.0 / 730)  # 7 GB × $0.10/GB-month × 1 h / 730 h
    assert bill.total == pytest.approx(price_job(sheet_offer, 3600.0).total + extra.amount)


def test_a_500_gb_dataset_in_another_region_adds_its_transfer_time_and_egress(llama8b: ModelShape) -> None:
    data = data_source(dataset_gb=500, region="aws:us-west-2")
    assert data is not None
    check = check_machine(LORA, llama8b, offer(), processes=1, data=data)
    transfer = check.transfer
    assert transfer is not None
    assert (transfer.route, transfer.usd_per_gb, transfer.gbps) == ("inter-region", 0.02, 1.0)
    assert transfer.seconds == pytest.approx(4000.0)  # 500e9 B / (1e9/8 B/s)
    assert transfer.egress_usd == pytest.approx(10.0)  # 500 GB × $0.02
    assert check.returned_gb == pytest.approx(LORA16 * 4 / 1e9)  # the adapters go back to us-west-2
    bill = price_on_machine(offer(), 3600.0, None, check)
    # $10/h × (3,600 s work + 4,000 s pull) / 3,600 + $10 egress; the offer has no egress tiers.
    assert bill.total == pytest.approx(10 * 7600 / 3600 + 10.0)
    assert bill.billed_s == pytest.approx(7600.0)


def test_outputs_sent_back_go_through_the_offers_egress_tiers(llama8b: ModelShape) -> None:
    tiered = offer(egress_tiers=[{"price_per_gb": 0.09}])
    data = DataSource(dataset_gb=500, cloud="aws", region="us-west-2")
    check = check_machine(LORA, llama8b, tiered, processes=1, data=data)
    bill = price_on_machine(tiered, 3600.0, CostOptions(egress_gb=1.0), check)
    egress = next(line for line in bill.lines if line.name == "egress")
    assert egress.amount == pytest.approx((1.0 + LORA16 * 4 / 1e9) * 0.09)


def test_the_same_region_is_free_and_faster(llama8b: ModelShape) -> None:
    check = check_machine(LORA, llama8b, offer(), processes=1, data=data_source(dataset_gb=500, region="us-east-1"))
    assert check.transfer is not None
    assert (check.transfer.route, check.transfer.egress_usd) == ("same region", 0.0)
    assert check.transfer.seconds == pytest.approx(800.0)  # 500 GB at 5 Gbit/s
    assert check.returned_gb == 0.0


@pytest.mark.parametrize(("where", "provider", "region", "route", "usd"), [
    ({"url": "https://bucket.s3.us-east-1.amazonaws.com/d"}, "Lambda", "", "internet", 45.0),  # 500 × $0.09
    ({"url": "https://example.org/data.tar"}, "AWS", "us-east-1", "internet", 60.0),  # unknown: dearest, $0.12
    ({"region": "gcp:us-central1"}, "GCP", "europe-west4", "other continent", 60.0),  # internet rate, a bound
    ({"region": "runpod:eu-ro-1"}, "AWS", "us-east-1", "free", 0.0),  # RunPod charges no egress
    ({"region": "aws:us-east-1"}, "AWS", "", "internet", 45.0),  # the offer's region is not stated
])
def test_routes_and_their_egress(where: dict[str, str], provider: str, region: str, route: str, usd: float) -> None:
    data = data_source(dataset_gb=500, **where)
    assert data is not None
    transfer = plan_transfer(data, offer(provider=provider, region=region))
    assert (transfer.route, transfer.egress_usd) == (route, pytest.approx(usd))


def test_the_users_own_price_and_bandwidth_win() -> None:
    data = data_source(dataset_gb=100, region="aws:eu-west-1", egress_usd_per_gb=0.05, gbps=10)
    assert data is not None
    transfer = plan_transfer(data, offer())
    assert (transfer.egress_usd, transfer.seconds) == (pytest.approx(5.0), pytest.approx(80.0))


def test_egress_is_converted_into_the_offers_currency(llama8b: ModelShape) -> None:
    eur = offer(currency="EUR")
    rate = ExchangeRate(currency="EUR", usd_per_unit=1.25, observed_at=TODAY, source="test")
    data = DataSource(dataset_gb=500, cloud="aws", region="us-west-2")
    check = check_machine(LORA, llama8b, eur, processes=1, data=data)
    bill = price_on_machine(eur, 3600.0, None, check, [rate])
    line = next(line for line in bill.lines if line.name.startswith("dataset egress"))
    assert line.amount == pytest.approx(10.0 / 1.25)


def test_a_size_alone_counts_on_disk_but_moves_nothing(llama8b: ModelShape) -> None:
    data = data_source(dataset_gb=500)
    assert data is not None and not data.placed
    check = check_machine(LORA, llama8b, offer(), processes=1, data=data)
    assert check.transfer is None
    assert check.needs.disk_bytes == LORA_DISK - 10_000_000 * 20 + 500 * 10**9


def test_what_the_sheet_does_not_state_is_noted_not_held_against_the_offer(llama8b: ModelShape) -> None:
    bare = Offer.model_validate({"id": "b", "provider": "p", "gpu": "h100", "gpu_count": 1, "price": 2.0,
                                 "price_basis": "gpu", "currency": "USD", "observed_at": TODAY, "source": "t"})
    assert available_disk_gb(bare) is None
    check = check_machine(OFFLOAD, llama8b, bare, processes=1)
    assert check.excluded is None
    assert check.notes == ("host RAM not stated (the job needs 199 GB), so not checked",
                           "disk not stated (the job needs 68 GB), so not checked")
    assert machine_offer(bare, check) == bare


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"dataset_gb": 5, "region": "mars-base"}, "cannot tell which cloud"),
    ({"dataset_gb": None, "region": "aws:us-east-1"}, "without --dataset-gb"),
    ({"dataset_gb": 5, "region": "aws:us-east-1", "url": "s3://b/k"}, "Both"),
    ({"dataset_gb": -1}, "--dataset-gb"),
    ({"dataset_gb": 5, "url": "ftp://host/x"}, "not a URL"),
    ({"dataset_gb": 5, "region": "aws:us-east-1", "gbps": 0}, "--dataset-gbps"),
])
def test_bad_data_flags_are_clear_errors(kwargs: dict[str, Any], words: str) -> None:
    with pytest.raises(SpecError) as err:
        data_source(**kwargs)
    assert words in err.value.what


def test_provider_names_and_continents() -> None:
    assert [cloud_key(n) for n in ("AWS", "Amazon Web Services", "Google Cloud", "Lambda", "Vast.ai")] == \
        ["aws", "aws", "gcp", "lambda", "vastai"]
    assert (continent("us-east-1"), continent("europe-west4"), continent("eastus")) == ("na", "eu", None)


def test_pick_excludes_a_host_without_ram_and_bills_the_farther_pull(llama8b: ModelShape) -> None:
    near, far, small = offer(id="near"), offer(id="far", region="us-west-2"), offer(id="small", ram_gb=16)
    data = data_source(dataset_gb=500, region="aws:us-east-1")
    result = pick(LORA, llama8b, [near, far, small], today=TODAY, options=CostOptions(data=data))
    rows = {r.offer_id: r for r in result.rows}
    # LoRA on 8B: 3 GiB process + 2 × 1.5 GiB workers + 16.06 GB of 16-bit load copy = 22.5 GB > 16 GB.
    assert rows["small"].excluded == "host RAM: needs 23 GB (checkpoint load copies 16 GB), has 16 GB"
    assert [r.offer_id for r in result.rows if r.excluded is None] == ["near", "far"]
    near_row, far_row = rows["near"], rows["far"]
    assert near_row.machine is not None and far_row.machine is not None
    assert near_row.runtime_s == far_row.runtime_s
    # far pays 500 GB × $0.02 and a pull of 4,000 s instead of 800 s at $10/h.
    assert (far_row.total_usd or 0) - (near_row.total_usd or 0) == pytest.approx(10.0 + 10 * 3200 / 3600)


def test_the_deadline_counts_the_datasets_pull(llama8b: ModelShape) -> None:
    """An offer that computes in time but must first pull 500 GB from another region misses a deadline
    set between the two: the job ends after the pull."""
    data = data_source(dataset_gb=500, region="aws:us-west-2")
    free = pick(LORA, llama8b, [offer()], today=TODAY, options=CostOptions(data=data))
    runtime = free.rows[0].runtime_s
    assert runtime is not None and free.rows[0].excluded is None
    deadline = runtime + 2000.0  # the pull takes 4,000 s
    late = pick(LORA, llama8b, [offer()], today=TODAY, options=CostOptions(data=data), deadline_s=deadline)
    assert late.rows[0].excluded is not None and late.rows[0].excluded.startswith("misses the deadline")
    near = data_source(dataset_gb=500, region="aws:us-east-1")  # 800 s at 5 Gbit/s: in time
    assert pick(LORA, llama8b, [offer()], today=TODAY, options=CostOptions(data=near),
                deadline_s=deadline).rows[0].excluded is None
