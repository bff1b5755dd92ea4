"""The whole machine on screen: the host table reads back the estimate's terms; pick's lines group offers."""

from __future__ import annotations

from datetime import date
from typing import Any

from gpuscout.cost.machine import check_machine
from gpuscout.cost.transfer import DataSource
from gpuscout.estimator.host import estimate_host
from gpuscout.hardware.offers import Offer
from gpuscout.report.footnotes import Footnotes
from gpuscout.report.machine import host_table, row_lines
from gpuscout.report.numbers import GIB
from gpuscout.workload.job import FinetuneJob
from gpuscout.workload.shape import ModelShape

from .screens import render, rows_by_header

WIDTH = 80
TODAY = date(2026, 11, 30)


def offer(**kw: Any) -> Offer:
    base: dict[str, Any] = {"id": "o", "provider": "AWS", "region": "us-east-1", "gpu": "h100", "gpu_count": 1,
                            "price": 10.0, "price_basis": "instance", "currency": "USD", "observed_at": TODAY,
                            "source": "test", "ram_gb": 250, "vcpus": 16}
    return Offer.model_validate(base | kw)


def test_host_table_shows_every_term_and_the_totals(llama8b: ModelShape) -> None:
    job = FinetuneJob(kind="finetune", model="llama-3-8b", method="full", optimizer_offload=True,
                      checkpoint_every_steps=100)
    needs = estimate_host(job, llama8b)
    text = render(host_table(needs, Footnotes()), WIDTH)
    assert max(len(line) for line in text.splitlines()) <= WIDTH
    rows = {r["term"]: r for r in rows_by_header(text, "term")}
    shown = [t for t in (*needs.ram, *needs.disk) if t.bytes]  # a zero term (freed load copies) is left out
    assert set(rows) == {t.name for t in shown} | {"host RAM", "disk"}
    for t in shown:
        assert float(rows[t.name]["GiB"].replace(",", "")) == round(t.bytes / GIB, 1)
        assert rows[t.name]["on"] == ("RAM" if t.kind == "ram" else "disk")
    assert float(rows["host RAM"]["GiB"].replace(",", "")) == round(needs.ram_bytes / GIB, 1)


def test_pick_lines_name_the_pull_the_extra_disk_and_what_is_unstated(llama8b: ModelShape) -> None:
    job = FinetuneJob(kind="finetune", model="llama-3-8b", method="lora")
    storage = [{"name": "root", "size_gb": 20, "price_per_gb_month": 0.08}]
    data = DataSource(dataset_gb=500, cloud="aws", region="us-west-2")
    check = check_machine(job, llama8b, offer(storage=storage, ram_gb=None), processes=1, data=data)
    lines = row_lines(check, "USD")
    assert lines[0] == ("dataset 500 GB from aws:us-west-2, inter-region at $0.02/GB and 1 Gbit/s: $10.00 egress, "
                        "67 min pull billed")  # 4,000 s
    assert lines[1].startswith("outputs (0.168 GB) go back")
    assert lines[2] == "extra disk 517 GB at $0.08/GB-month (the job needs 536 GB)"
    assert lines[3] == "note, host RAM not stated (the job needs 23 GB), so not checked"
