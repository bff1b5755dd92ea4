"""`offers pull` against catalogs built in the test, never the network.

gpuhunt's part reads `{provider}.csv` files written here in gpuhunt's own offline catalog format (the
header is checked against gpuhunt's `CATALOG_V2_FIELDS`, so a format change fails here), through the
real gpuhunt with `GPUHUNT_CATALOG_DIR` set and every network entry point gpuhunt uses made to fail.
SkyPilot's part reads `~/.sky/catalogs/v8/<cloud>/vms.csv` under a HOME made for the test.
"""

from __future__ import annotations

import csv
import io
import os
import sys
import urllib.request
from collections.abc import Iterator
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest

from gpuscout import api
from gpuscout.errors import GpuscoutError, MissingDependencyError
from gpuscout.hardware.billing_rules import UNKNOWN_RULES_NOTE, billing_rules, parse_rules
from gpuscout.hardware.price_sheet import load_price_sheet

DATA = Path(__file__).parent / "data"
FIELDS = ["instance_name", "location", "price", "cpu", "memory", "gpu_count", "gpu_name", "gpu_memory", "spot",
          "disk_size", "gpu_vendor", "flags", "cpu_arch", "provider_data"]

AWS_ROWS = [
    ["p4d.24xlarge", "us-east-1", "32.7726", "96", "1152.0", "8", "A100", "40.0", "False", "", "nvidia", "", "x86",
     "{}"],
    ["p5.48xlarge", "us-east-1", "55.04", "192", "2048.0", "8", "H100", "80.0", "False", "", "nvidia", "", "x86", "{}"],
    ["p5.48xlarge", "us-east-1", "22.1", "192", "2048.0", "8", "H100", "80.0", "True", "", "nvidia", "", "x86", "{}"],
    ["inf2.xlarge", "us-east-1", "0.76", "4", "16.0", "1", "Inferentia2", "32.0", "False", "", "nvidia", "", "x86",
     "{}"],
    ["trn1.2xlarge", "us-east-1", "1.34", "8", "32.0", "1", "Trainium", "32.0", "False", "", "nvidia", "", "x86", "{}"],
]
# Vast: gpuhunt folds the disk into $/h: 0.40 + 100 GB x 0.46 $/GB-month / 30 / 24 = 0.463889.
VAST_ROWS = [
    ["12345", "US-CA", "0.46389", "16", "64.0", "1", "RTX4090", "24.0", "False", "100.0", "nvidia", "", "x86",
     '{"dph_base": 0.4, "disk_size": 100.0, "storage_cost": 0.46}'],
    ["12346", "CZ", "0.3", "8", "32.0", "1", "RTX3090", "24.0", "False", "50.0", "nvidia", "", "x86", "{}"],
]
# RunPod: one pod, and an instant cluster (gpuhunt flags it; 2-8 pods, never one machine).
RUNPOD_ROWS = [
    ["NVIDIA H100 80GB HBM3", "US-KS-2", "2.99", "24", "251.0", "1", "H100", "80.0", "False", "", "nvidia", "", "x86",
     "{}"],
    ["NVIDIA H100 80GB HBM3", "US-TX-3", "23.92", "224", "1500.0", "8", "H100", "80.0", "False", "", "nvidia",
     "runpod-cluster", "x86", '{"pod_counts": [2, 3, 4, 5, 6, 7, 8]}'],
]


def write_catalog(folder: Path, provider: str, rows: list[list[str]]) -> Path:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(FIELDS)
    writer.writerows(rows)
    path = folder / f"{provider}.csv"
    path.write_text(buffer.getvalue(), encoding="utf-8")
    return path


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """A GPUHUNT_CATALOG_DIR of fixtures, with every way gpuhunt reaches the network made to fail loudly."""
    pytest.importorskip("gpuhunt", reason="gpuhunt is not installed: pip install 'gpuscout[offers]'")
    import requests  # gpuhunt's online providers post through requests
    from gpuhunt._internal import storage

    assert storage.CATALOG_V2_FIELDS == FIELDS  # the fixtures are in the format gpuhunt reads
    calls: list[str] = []

    def no_network(*args: Any, **kwargs: Any) -> Any:
        calls.append(str(args[:1]))
        raise AssertionError(f"network use in a test: {args[:1]}")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    monkeypatch.setattr(requests, "post", no_network)
    monkeypatch.setattr(requests, "get", no_network)
    monkeypatch.setattr(requests.Session, "request", no_network)
    folder = tmp_path / "catalogs"
    folder.mkdir()
    write_catalog(folder, "aws", AWS_ROWS)
    write_catalog(folder, "vastai", VAST_ROWS)
    monkeypatch.setenv("GPUHUNT_CATALOG_DIR", str(folder))
    monkeypatch.setenv("GPUHUNT_CATALOG_URL", "http://127.0.0.1:9/never")
    yield folder
    assert calls == []


def test_a_gpuhunt_pull_reads_the_fixtures_and_writes_a_sheet_pick_reads(offline: Path, tmp_path: Path) -> None:
    out = tmp_path / "today.toml"
    report = api.pull_offers(out, source="gpuhunt")
    pulled = report.pull
    assert {p.provider: p.offers for p in pulled.providers} == {"aws": 3, "vastai": 2}
    assert pulled.unknown_gpus == {"Inferentia2": 1, "Trainium": 1}  # skipped and counted by name
    sheet = load_price_sheet(out)  # an ordinary price sheet
    by_id = {o.id: o for o in sheet.offers}
    p4d = by_id["aws-p4d.24xlarge-us-east-1"]
    assert (p4d.gpu, p4d.gpu_count, p4d.price, p4d.currency) == ("a100-sxm4-40gb", 8, 32.7726, "USD")
    assert p4d.observed_at == date.fromtimestamp((offline / "aws.csv").stat().st_mtime)
    assert "aws.csv" in p4d.source and "gpuhunt" in p4d.source  # the fixture, by name: nothing was fetched
    aws = billing_rules().find("aws")
    assert aws is not None
    assert (p4d.billing_increment_s, p4d.min_billed_s, p4d.billing_starts) == (
        aws.billing_increment_s, aws.min_billed_s, aws.billing_starts)
    assert by_id["aws-p5.48xlarge-us-east-1-spot"].tier == "spot"
    text = out.read_text(encoding="utf-8")
    assert "from gpuhunt" in text and "Inferentia2" in text  # the header says what was fetched and skipped
    ranked = api.pick("tiny-finetune", offers=out, today=p4d.observed_at)
    assert any(r.excluded is None for r in ranked.pick.rows)


def test_vast_disk_folded_into_the_hourly_price_is_billed_once(offline: Path, tmp_path: Path) -> None:
    out = tmp_path / "vast.toml"
    api.pull_offers(out, source="gpuhunt", providers=["vastai"])
    by_id = {o.id: o for o in load_price_sheet(out).offers}
    unfolded = by_id["vastai-12345-US-CA"]
    assert unfolded.price == pytest.approx(0.4)  # dph_base: the disk taken back out of gpuhunt's 0.46389
    (disk,) = unfolded.storage
    assert (disk.size_gb, disk.price_per_gb_month, disk.hours_per_month) == (100.0, 0.46, 720.0)
    assert unfolded.price + disk.size_gb * disk.price_per_gb_month / disk.hours_per_month == pytest.approx(0.46389,
                                                                                                          abs=1e-5)
    folded = by_id["vastai-12346-CZ"]  # gpuhunt gave no storage_cost: the folded price, no second disk charge
    assert folded.price == 0.3 and folded.storage == () and folded.included_disk_gb == 50.0
    assert "not billed again" in folded.notes
    assert unfolded.available is True and folded.available is True  # Vast's search asks for rentable offers


def test_a_failing_provider_is_named_and_the_others_kept(offline: Path, tmp_path: Path) -> None:
    out = tmp_path / "two.toml"
    report = api.pull_offers(out, source="gpuhunt", providers=["aws", "runpod"])  # no runpod.csv in the folder
    parts = {p.provider: p for p in report.pull.providers}
    assert parts["aws"].error is None and parts["aws"].offers == 3
    assert parts["runpod"].error is not None and "runpod" in parts["runpod"].error
    assert "runpod: FAILED" in out.read_text(encoding="utf-8")
    with pytest.raises(GpuscoutError, match="runpod"):  # nothing at all pulled: an error, no sheet
        api.pull_offers(tmp_path / "none.toml", source="gpuhunt", providers=["runpod"])
    assert not (tmp_path / "none.toml").exists()


def test_gpuhunt_flagged_cluster_offers_are_skipped_with_the_reason(offline: Path, tmp_path: Path) -> None:
    write_catalog(offline, "runpod", RUNPOD_ROWS)
    out = tmp_path / "runpod.toml"
    report = api.pull_offers(out, source="gpuhunt", providers=["runpod"])
    (pod,) = load_price_sheet(out).offers
    assert (pod.gpu, pod.gpu_count, pod.price) == ("h100-sxm5-80gb", 1, 2.99)
    assert report.pull.skipped == {"flagged by gpuhunt (runpod-cluster): not one rentable machine": 1}


def test_gpu_and_tier_filters(offline: Path, tmp_path: Path) -> None:
    out = tmp_path / "h100.toml"
    api.pull_offers(out, source="gpuhunt", providers=["aws"], gpus=["h100"], spot=True)
    (only,) = load_price_sheet(out).offers
    assert (only.gpu, only.tier, only.price) == ("h100-sxm5-80gb", "spot", 22.1)
    api.pull_offers(out, source="gpuhunt", providers=["aws"], spot=False)
    assert {o.tier for o in load_price_sheet(out).offers} == {"on-demand"}


def test_an_unknown_provider_rules_row_says_per_second_assumed() -> None:
    table = parse_rules({"provider": {"aws": {"name": "AWS", "source": "test", "checked": date(2026, 12, 3)}}})
    from gpuscout.hardware.gpuhunt import offer_from_item

    class Item:
        provider, instance_name, location, price, cpu, memory = "nowhere", "big-box", "mars-1", 2.5, 8, 64.0
        gpu_count, gpu_name, gpu_memory, spot, disk_size, provider_data = 1, "L40S", 48.0, False, None, {}

    offer, reason = offer_from_item(Item(), version="test", gh_version="0", observed_at=date(2026, 12, 3), table=table)
    assert offer is not None, reason
    assert UNKNOWN_RULES_NOTE in offer.notes and offer.billing_increment_s == 1.0 and offer.provider == "nowhere"


def test_without_gpuhunt_the_pull_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "gpuhunt", None)  # `import gpuhunt` now raises ImportError
    with pytest.raises(MissingDependencyError, match=r"gpuhunt is not installed: pip install 'gpuscout\[offers\]'"):
        api.pull_offers(tmp_path / "x.toml", source="gpuhunt")


def sky_home(tmp_path: Path, clouds: dict[str, str]) -> Path:
    home = tmp_path / "home"
    for cloud, data_file in clouds.items():
        folder = home / ".sky" / "catalogs" / "v8" / cloud
        folder.mkdir(parents=True)
        (folder / "vms.csv").write_text((DATA / data_file).read_text(encoding="utf-8"), encoding="utf-8")
    return home


def test_a_skypilot_pull_reads_the_cached_catalogs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    home = sky_home(tmp_path, {"aws": "skypilot_aws_vms.csv", "lambda": "skypilot_lambda_vms.csv"})
    monkeypatch.setenv("HOME", str(home))
    out = tmp_path / "sky.toml"
    report = api.pull_offers(out, source="skypilot")
    parts = {p.provider: p for p in report.pull.providers}
    assert set(parts) == {"aws", "lambda"} and all(p.error is None for p in parts.values())
    offers = load_price_sheet(out).offers
    assert {o.provider for o in offers} == {"AWS", "Lambda"}
    lam = next(o for o in offers if o.provider == "Lambda")
    rules = billing_rules().find("lambda")
    assert rules is not None and lam.billing_increment_s == rules.billing_increment_s
    assert all("SkyPilot catalog" in o.source for o in offers)
    # One cloud asked for that is not cached: named, the other kept.
    report = api.pull_offers(out, source="skypilot", providers=["aws", "gcp"])
    parts = {p.provider: p for p in report.pull.providers}
    assert parts["gcp"].error is not None and "gcp" in parts["gcp"].error and parts["aws"].offers > 0


def test_a_pulled_sheet_older_than_30_days_is_flagged(offline: Path, tmp_path: Path) -> None:
    old = datetime(2026, 10, 1, tzinfo=UTC).timestamp()
    os.utime(offline / "aws.csv", (old, old))
    out = tmp_path / "old.toml"
    api.pull_offers(out, source="gpuhunt", providers=["aws"])
    ranked = api.pick("tiny-finetune", offers=out, today=date(2026, 12, 3))
    assert any("older than 30 days" in w for w in ranked.pick.warnings)
