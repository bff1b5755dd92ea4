"""SkyPilot vms.csv import: column orders of AWS, GCP and Lambda, GPU mapping, skipped rows."""

from __future__ import annotations

import contextlib
import tempfile
from datetime import date
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscout.errors import SpecError
from gpuscout.hardware.billing_rules import billing_rules
from gpuscout.hardware.offers import Offer
from gpuscout.hardware.skypilot import (
    FRACTIONAL,
    HOST_WITHOUT_GPU,
    NO_GPU,
    UNKNOWN_GPU,
    UNMATCHED_ATTACHABLE,
    SkypilotImport,
    describe_import,
    import_skypilot_catalog,
    map_gpu,
)

DATA = Path(__file__).parent / "data"
OBSERVED = date(2026, 11, 1)


def _import(name: str, cloud: str, *, include_spot: bool = True) -> SkypilotImport:
    return import_skypilot_catalog(DATA / name, cloud=cloud, observed_at=OBSERVED, include_spot=include_spot)


def _by_id(result: SkypilotImport) -> dict[str, Offer]:
    return {offer.id: offer for offer in result.offers}


def test_aws_rows_become_instance_priced_offers() -> None:
    result = _import("skypilot_aws_vms.csv", "aws")
    offers = _by_id(result)
    p4d = offers["aws-p4d.24xlarge-us-east-1a"]
    assert (p4d.gpu, p4d.gpu_count, p4d.price, p4d.price_basis, p4d.currency) == (
        "a100-sxm4-40gb", 8, 21.957642, "instance", "USD",
    )  # fmt: skip
    assert (p4d.billing_increment_s, p4d.min_billed_s, p4d.billing_starts) == (1.0, 60.0, "running")
    assert p4d.region == "us-east-1" and p4d.vcpus == 96
    assert p4d.ram_gb == pytest.approx(1152 * 1.073741824)
    assert p4d.observed_at == OBSERVED and p4d.source == "SkyPilot catalog skypilot_aws_vms.csv (aws)"
    assert offers["aws-p4d.24xlarge-us-east-1a-spot"].tier == "spot"
    assert offers["aws-p4d.24xlarge-us-east-1a-spot"].price == 8.7831
    assert offers["aws-p4de.24xlarge-us-east-1c"].gpu == "a100-sxm4-80gb"
    assert offers["aws-p5.48xlarge-us-east-1b"].gpu == "h100-sxm5-80gb"
    assert "aws-p5.48xlarge-us-east-1b-spot" not in offers  # no SpotPrice in the row
    assert offers["aws-g6e.xlarge-us-east-1a"].gpu == "l40s"
    assert offers["aws-g5.xlarge-us-east-1d"].gpu == "a10g"


def test_aws_skipped_rows_are_counted_with_reasons() -> None:
    result = _import("skypilot_aws_vms.csv", "aws")
    reasons = sorted((row.accelerator, row.reason) for row in result.skipped)
    assert reasons == sorted(
        [
            ("H100", "duplicate row"),
            ("L4", FRACTIONAL),
            ("Inferentia2", UNKNOWN_GPU),
            ("", NO_GPU),
        ]
    )
    summary = describe_import(result)
    assert summary.startswith("imported 12 offers, skipped 4 rows (unknown GPUs: Inferentia2;")
    assert _by_id(result)["aws-p3.8xlarge-us-east-1a"].gpu == "v100-sxm2-16gb"  # V100 is in the catalog (docs/gpus.md)
    assert "fractional GPU count: 1" in summary


def test_include_spot_false_gives_on_demand_only() -> None:
    result = _import("skypilot_aws_vms.csv", "aws", include_spot=False)
    assert {offer.tier for offer in result.offers} == {"on-demand"}
    assert len(result.offers) == 7


def test_gcp_host_and_attachable_gpu_prices_are_summed() -> None:
    result = _import("skypilot_gcp_vms.csv", "gcp")
    offers = _by_id(result)
    # Host + GPU reproduce the published machine prices (docs/prices.md P1, us-central1).
    assert offers["gcp-a2-highgpu-1g-us-central1-a"].price == pytest.approx(3.6734, abs=1e-4)
    assert offers["gcp-a2-highgpu-1g-us-central1-a-spot"].price == pytest.approx(1.9280, abs=1e-4)
    eight = offers["gcp-a2-highgpu-8g-us-central1-a"]
    assert (eight.gpu, eight.gpu_count) == ("a100-sxm4-40gb", 8)
    assert eight.price == pytest.approx(29.3871, abs=1e-3)
    ultra = offers["gcp-a2-ultragpu-1g-us-central1-a"]
    assert ultra.gpu == "a100-sxm4-80gb"
    assert ultra.price == pytest.approx(5.0688, abs=1e-4)
    assert offers["gcp-g2-standard-4-us-central1-a"].gpu == "l4"
    assert offers["gcp-g2-standard-4-us-central1-a"].price == pytest.approx(0.7068, abs=1e-4)
    assert all(offer.price_basis == "instance" and offer.min_billed_s == 60 for offer in result.offers)


def test_gcp_attachable_rows_are_never_taken_for_machines() -> None:
    result = _import("skypilot_gcp_vms.csv", "gcp")
    assert all(offer.product for offer in result.offers)
    reasons = {(row.accelerator, row.reason) for row in result.skipped}
    assert reasons == {
        ("H100", HOST_WITHOUT_GPU),  # a3-highgpu-8g, whose H100 row is not in the file
        ("", NO_GPU),  # n1-standard-8
        ("L4", UNMATCHED_ATTACHABLE),  # europe-west4 L4 with no g2 host there
        ("T4", UNMATCHED_ATTACHABLE),  # a GPU the catalog knows, whose n1 host is not in the file
    }


def test_lambda_column_order_and_billing_terms() -> None:
    result = _import("skypilot_lambda_vms.csv", "lambda")
    offers = _by_id(result)
    assert offers["lambda-gpu_1x_h100_pcie-us-west-3"].gpu == "h100-pcie-80gb"
    assert offers["lambda-gpu_8x_h100_sxm5-us-east-1"].gpu == "h100-sxm5-80gb"
    assert offers["lambda-gpu_8x_a100-us-east-1"].gpu == "a100-sxm4-40gb"  # "A100" with 40960 MiB
    assert offers["lambda-gpu_8x_a100_80gb_sxm4-us-east-1"].gpu == "a100-sxm4-80gb"
    assert offers["lambda-gpu_1x_a10-us-east-1"].gpu == "a10"
    assert offers["lambda-gpu_1x_gh200-us-east-3"].gpu == "gh200-96gb"
    assert all(o.billing_increment_s == 60 and o.billing_starts == "healthy" for o in result.offers)
    assert all(o.tier == "on-demand" for o in result.offers)  # empty SpotPrice
    assert offers["lambda-gpu_8x_v100-us-east-1"].gpu == "v100-sxm2-16gb"
    assert describe_import(result) == "imported 7 offers, skipped 1 rows (no GPU: 1)"


def test_missing_columns_name_expected_and_found() -> None:
    with pytest.raises(SpecError) as err:
        _import("skypilot_missing_columns.csv", "lambda")
    message = str(err.value)
    assert "lacks the columns AcceleratorName, AcceleratorCount, vCPUs, MemoryGiB, Price" in message
    assert "found InstanceType, GPU, GPUCount, HourlyPrice, Region" in message


def test_bad_rows_are_skipped_not_fatal() -> None:
    result = _import("skypilot_bad_rows.csv", "lambda")
    assert [offer.gpu for offer in result.offers] == ["h100-pcie-80gb"]
    reasons = [row.reason for row in result.skipped]
    assert reasons == [
        "no usable on-demand Price 'N/A'",
        "malformed row (wrong number of fields)",
        "unreadable AcceleratorCount 'one'",
    ]


def test_unreadable_or_empty_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError):
        import_skypilot_catalog(tmp_path / "missing.csv", cloud="aws", observed_at=OBSERVED)
    empty = tmp_path / "empty.csv"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(SpecError) as err:
        import_skypilot_catalog(empty, cloud="aws", observed_at=OBSERVED)
    assert "no header" in str(err.value)


def test_unknown_cloud_gets_default_terms_and_a_note(tmp_path: Path) -> None:
    lines = (DATA / "skypilot_lambda_vms.csv").read_text(encoding="utf-8").splitlines()
    path = tmp_path / "vms.csv"
    path.write_text("\n".join(lines[:3]) + "\n", encoding="utf-8")
    result = import_skypilot_catalog(path, cloud="Nowhere-Cloud", observed_at=OBSERVED)
    (offer,) = result.offers
    assert offer.provider == "nowhere-cloud" and offer.billing_increment_s == 1.0
    assert "billing rules unknown: per-second assumed" in offer.notes


def test_cloud_rules_come_from_the_billing_rules_table(tmp_path: Path) -> None:
    """A cloud in the table takes its display name and terms from it; an assumed entry says so on the row."""
    lines = (DATA / "skypilot_lambda_vms.csv").read_text(encoding="utf-8").splitlines()
    path = tmp_path / "vms.csv"
    path.write_text("\n".join(lines[:3]) + "\n", encoding="utf-8")
    rules = billing_rules().find("nebius")
    assert rules is not None
    (offer,) = import_skypilot_catalog(path, cloud="Nebius", observed_at=OBSERVED).offers
    assert offer.provider == rules.name
    assert (offer.billing_increment_s, offer.min_billed_s, offer.billing_starts) == (
        rules.billing_increment_s, rules.min_billed_s, rules.billing_starts)
    assert ("no public statement found" in offer.notes) == rules.assumed


@pytest.mark.parametrize(
    ("accelerator", "instance", "memory_mib", "sku"),
    [
        ("A100", "p4d.24xlarge", 40960, "a100-sxm4-40gb"),
        ("A100", "", None, "a100-sxm4-40gb"),
        ("A100", "gpu_8x_a100_80gb", 81920, "a100-sxm4-80gb"),
        ("A100-80GB", "", None, "a100-sxm4-80gb"),
        ("A100-80GB", "Standard_NC24ads_A100_v4", 81920, "a100-pcie-80gb"),
        ("A100", "gpu_1x_a100_pcie", 40960, "a100-pcie-40gb"),
        ("H100", "p5.48xlarge", 81920, "h100-sxm5-80gb"),
        ("H100-MEGA", "a3-megagpu-8g", None, "h100-sxm5-80gb"),
        ("H100-SXM", "", None, "h100-sxm5-80gb"),
        ("H100", "gpu_1x_h100_pcie", 81920, "h100-pcie-80gb"),
        ("H100", "Standard_NC40ads_H100_v5", 95830, "h100-nvl-94gb"),
        ("H200", "p5en.48xlarge", 143771, "h200-sxm-141gb"),
        ("L40S", "", None, "l40s"),
        ("L4", "", None, "l4"),
        ("A10G", "", None, "a10g"),
        ("A10", "", None, "a10"),
        ("RTX4090", "", None, "rtx-4090"),
        ("A6000", "", None, "rtx-a6000"),
        ("V100", "", None, "v100-sxm2-16gb"),
        ("V100-32GB", "", None, "v100-sxm2-32gb"),
        ("T4", "", None, "t4"),
        ("K80", "", None, None),
        ("tpu-v5p-8", "", None, None),
    ],
)
def test_gpu_mapping(accelerator: str, instance: str, memory_mib: float | None, sku: str | None) -> None:
    assert map_gpu(accelerator, instance, memory_mib) == sku


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=400))
def test_random_csv_text_raises_only_spec_errors(text: str) -> None:
    header = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,Region,GpuInfo,SpotPrice\n"
    with tempfile.TemporaryDirectory() as folder:
        for body in (text, header + text):
            path = Path(folder) / "vms.csv"
            path.write_text(body, encoding="utf-8", errors="surrogatepass")
            with contextlib.suppress(SpecError):
                import_skypilot_catalog(path, cloud="aws", observed_at=OBSERVED)
