"""The committed error bands (src/gpuscout/estimator/margins.toml) are what the benchmark derives from the
committed validation points, leave one source out; and the leave-one-source-out machinery itself."""

from __future__ import annotations

import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from benchmark_script import load_benchmark
from gpuscout.estimator import overhead
from gpuscout.estimator.margin import MARGINS_FILE

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_benchmark("published_error")


@pytest.fixture(scope="module")
def rows(bench: ModuleType) -> list[Any]:
    from published import loso

    points, errors = bench.load_points(bench.POINTS_DIR)
    assert not errors
    found = bench.estimate_rows(points, [])
    loso.apply(found)
    return list(found)


def test_the_committed_bands_are_what_the_validation_data_gives(rows: list[Any]) -> None:
    from published import margins

    committed = tomllib.loads(MARGINS_FILE.read_text(encoding="utf-8"))
    derived = margins.derive(rows)
    assert [{k: b[k] for k in ("category", "setup", "points", "sources", "worst", "note")} for b in committed["band"]] \
        == [{k: b[k] for k in ("category", "setup", "points", "sources", "worst", "note")} for b in derived]
    for mine, theirs in zip(committed["band"], derived, strict=True):
        assert mine["band"] == pytest.approx(theirs["band"], abs=1e-4), (mine["category"], mine["setup"])
    assert "--write-margins" in committed["derivation"]["command"]


def test_loso_refits_only_what_a_source_informed_and_restores_the_constants(rows: list[Any]) -> None:
    from published import loso

    assert overhead.CONV_WORKSPACE_INPUTS == 1.0 and overhead.VLLM_SAMPLER_BYTES_PER_LOGIT == 36  # restored
    by_id = {r.point.id: r for r in rows}
    # No constant was fitted on training points: leaving a source out changes nothing there.
    fms = by_id["fms-mistral7b-lora-fsdp2-bs4-a100-80"]
    assert fms.loso == fms.after["value"]
    # The SDXL blog's runs set the cuDNN workspace term: without them it is refitted and the error moves.
    sdxl = by_id["hfblog-sdxl-fp16-eager-a100-40"]
    assert sdxl.loso is not None and sdxl.loso != sdxl.after["value"]
    # The FLUX run informed nothing, so the shipped (hand-set, FLUX-blind) constant already is its LOSO fit.
    flux = by_id["hfblog-flux-dev-bf16-h100"]
    assert flux.loso == flux.after["value"]
    assert loso.source_key("https://github.com/vllm-project/vllm/issues/10517 (comment by x)") == \
        "vllm-project/vllm#10517"
    assert loso.source_key("pytorch/torchtune:README.md@abc") == loso.source_key("pytorch/torchtune:README.md@def")


def test_a_band_is_the_largest_shortfall_of_its_group(rows: list[Any]) -> None:
    from published import margins

    derived = {(b["category"], b["setup"]): b for b in margins.derive(rows)}
    sharded = derived[("training_peak", "sharded")]
    worst = next(r for r in rows if r.point.id == sharded["worst"])
    assert sharded["band"] == pytest.approx(worst.point.measured / worst.loso - 1, abs=1e-4)
    # a setup with fewer than MIN_POINTS points never gets a band below its category's
    for (category, setup), b in derived.items():
        if setup != "all" and b["points"] < margins.MIN_POINTS:
            assert b["band"] >= derived[(category, "all")]["band"]


def test_the_report_has_the_loso_column_and_section(bench: ModuleType, tmp_path: Path) -> None:
    out = tmp_path / "published.md"
    margins_out = tmp_path / "margins.toml"
    assert bench.main(["--no-peers", "--out", str(out), "--write-margins", str(margins_out)]) == 0
    text = out.read_text(encoding="utf-8")
    assert "| LOSO |" in text and "unsafe (LOSO)" in text and "## 2. Leave one source out" in text
    assert "LOSO = in-sample" in text  # categories with no fitted constant say so
    assert tomllib.loads(margins_out.read_text(encoding="utf-8"))["band"]
