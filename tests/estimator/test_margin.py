"""Fits / tight / does not fit: the verdict at the band's edge, the band a job takes, --margin, the
largest sizes with and without the band, and the pick side (tight rows marked, the OOM risk priced)."""

from __future__ import annotations

from datetime import date
from typing import Any

import pytest

from gpuscout.api.jobs import job_and_model
from gpuscout.cost.billed_time import billed_seconds, billed_startup_s
from gpuscout.cost.billing import rate_per_s
from gpuscout.cost.pick import lay_out, pick
from gpuscout.cost.pick_row import PickRow
from gpuscout.estimator.fit import largest_fitting
from gpuscout.estimator.margin import (
    FITS,
    NO_FIT,
    TIGHT,
    Band,
    BandRow,
    Margins,
    MarginsError,
    band_for,
    check_margin_pct,
    guarded_peak_limit,
    judge_fit,
    load_margins,
    setups_of,
)
from gpuscout.estimator.memory import estimate_memory
from gpuscout.estimator.screen import judge, screen
from gpuscout.hardware.catalog import find_gpu
from gpuscout.hardware.offers import Offer
from gpuscout.workload.job import FinetuneJob, ImageJob, Job

TODAY = date(2026, 12, 3)
RTX5090 = find_gpu("rtx-5090")


def band(fraction: float) -> Band:
    return Band(fraction=fraction, category="training_peak", setups=(), basis="test")


@pytest.mark.parametrize(("usable", "expected"), [
    (1100, FITS),   # headroom 100 = 10% of the peak: exactly at the band's edge, it fits
    (1101, FITS),   # just outside the band
    (1099, TIGHT),  # just inside
    (1000, TIGHT),  # no headroom at all: still fits, inside the band
    (999, NO_FIT),  # one byte short
])
def test_the_verdict_at_the_band_edge(usable: int, expected: str) -> None:
    assert judge_fit(1000, usable, band(0.10)) == expected


def test_a_zero_band_is_the_old_yes_or_no() -> None:
    assert judge_fit(1000, 1000, band(0.0)) == FITS
    assert judge_fit(1001, 1000, band(0.0)) == NO_FIT


def test_guarded_peak_limit_is_the_last_peak_that_fits() -> None:
    limit = guarded_peak_limit(1100, band(0.10))
    assert judge_fit(limit, 1100, band(0.10)) == FITS
    assert judge_fit(limit + 1, 1100, band(0.10)) == TIGHT


def test_setups_are_read_from_the_job() -> None:
    job, _, _ = job_and_model(None)
    assert isinstance(job, FinetuneJob)
    assert setups_of(job) == ("qlora",)
    sharded = job.model_copy(update={"gpus": 2, "sharding": "fsdp", "optimizer_offload": True,
                                     "seq_len": 32768, "allow_long_context": True})
    assert setups_of(sharded) == ("sharded", "qlora", "cpu offload", "long context")
    assert setups_of(job.model_copy(update={"method": "lora"})) == ()
    # Parameter offload is CPU offload and a group of its own (the allocator's reserve under it).
    offloaded = job.model_copy(update={"gpus": 2, "sharding": "fsdp", "offload_params": True})
    assert setups_of(offloaded) == ("sharded", "qlora", "cpu offload", "parameter offload")


def test_a_job_takes_the_largest_of_its_category_and_setup_bands() -> None:
    margins = Margins(derivation={}, rows=(
        BandRow(category="training_peak", setup="all", band=0.08, points=12, sources=("a", "b"), worst="x"),
        BandRow(category="training_peak", setup="qlora", band=0.13, points=13, sources=("a",), worst="y"),
        BandRow(category="training_peak", setup="sharded", band=0.17, points=13, sources=("a",), worst="z"),
    ))
    job, _, _ = job_and_model(None)
    assert isinstance(job, FinetuneJob)
    assert band_for(job, margins=margins).fraction == 0.13
    sharded = job.model_copy(update={"gpus": 2, "sharding": "fsdp"})
    got = band_for(sharded, margins=margins)
    assert got.fraction == 0.17 and set(got.setups) == {"sharded", "qlora"}
    assert "13 published points from 1 source" in got.basis
    plain = job.model_copy(update={"method": "lora"})
    assert band_for(plain, margins=margins).fraction == 0.08
    assert band_for(plain, 25.0, margins=margins).fraction == 0.25  # --margin replaces the band
    assert band_for(plain, 25.0, margins=margins).override


def test_the_shipped_bands_cover_every_job_kind() -> None:
    shipped = load_margins()
    assert {r.category for r in shipped.rows if r.setup == "all"} == {
        "training_peak", "inference_peak", "image_peak", "video_peak"}
    assert all(r.band >= 0 for r in shipped.rows)
    assert {"command", "date", "commit", "statistic", "points"} <= set(shipped.derivation)


def test_a_margin_out_of_range_is_a_clear_error() -> None:
    assert check_margin_pct(15) == 15
    for bad in (-1.0, 501.0, float("nan")):
        with pytest.raises(MarginsError, match="--margin"):
            check_margin_pct(bad)


def _at_one_percent() -> tuple[Job, Any]:
    """The default job at micro-batch 1, its sequence as long as fits on an RTX 5090: under 1% headroom."""
    job, model, _ = job_and_model(None)
    j1 = job.model_copy(update={"micro_batch": 1, "grad_accum": 16, "allow_long_context": True})
    longest = largest_fitting(j1, model, RTX5090, "seq_len", 65536)
    return j1.model_copy(update={"seq_len": longest}), model


def test_the_rtx_5090_at_one_percent_headroom_is_tight_and_says_why() -> None:
    job, model = _at_one_percent()
    b = estimate_memory(job, model, RTX5090)
    assert 0 <= b.headroom_bytes <= 0.01 * b.usable_bytes
    v = judge(job, model, RTX5090)
    assert v.fits and v.fit_verdict == TIGHT
    assert v.band is not None and v.band.fraction == band_for(job).fraction > 0.01
    assert "training peaks, qlora" in v.band.basis and "without its own source" in v.band.basis
    # --margin 0 turns the guard off: the old yes
    assert screen(job, model, [RTX5090], margin_pct=0.0).verdicts[0].fit_verdict == FITS


def test_largest_sizes_with_the_band_and_without_it() -> None:
    job, model = _at_one_percent()
    v = judge(job, model, RTX5090)
    guarded, unguarded = v.limits.guarded["seq_len"], v.limits.values["seq_len"]
    assert 0 < guarded < unguarded == job.seq_len  # type: ignore[attr-defined]
    b_in = estimate_memory(job.model_copy(update={"seq_len": guarded}), model, RTX5090)
    b_out = estimate_memory(job.model_copy(update={"seq_len": guarded + 1}), model, RTX5090)
    assert judge_fit(b_in.peak_bytes, b_in.usable_bytes, v.band) == FITS  # type: ignore[arg-type]
    assert judge_fit(b_out.peak_bytes, b_out.usable_bytes, v.band) == TIGHT  # type: ignore[arg-type]


def test_pick_prefers_a_plan_that_leaves_margin_at_little_cost() -> None:
    """Chunked cross-entropy costs the speed model nothing, so the tight layout gives way to it."""
    job, model = _at_one_percent()
    layout = lay_out(job, model, RTX5090, 1)
    assert layout.fit_verdict == FITS and layout.placement is not None
    assert [s.spec_change for s in layout.placement.plan] == [{"chunked_cross_entropy": True}]
    b = estimate_memory(layout.placement.job, model, RTX5090)
    assert judge_fit(b.peak_bytes, b.usable_bytes, band_for(layout.placement.job)) == FITS


def offer_5090(**kw: Any) -> Offer:
    base: dict[str, Any] = {"id": "five", "provider": "p", "gpu": "rtx-5090", "gpu_count": 1, "price": 0.9,
                            "price_basis": "gpu", "currency": "USD", "observed_at": TODAY, "source": "test",
                            "startup_s": 300, "min_billed_s": 600, "billing_increment_s": 60, "idle_tail_s": 60}
    return Offer.model_validate(base | kw)


def test_a_tight_row_with_no_margin_plan_is_ranked_marked_and_priced() -> None:
    """--margin 400: no plan leaves that much, so the row stays tight; an OOM first attempt costs a
    billed failed start plus the whole run again (no fallback plan)."""
    job, model = _at_one_percent()
    o = offer_5090()
    result = pick(job, model, [o], today=TODAY, margin_pct=400.0)
    r: PickRow = result.rows[0]
    assert r.excluded is None and r.fit_verdict == TIGHT
    failed = billed_seconds(billed_startup_s(o) + o.idle_tail_s, o) * rate_per_s(o)
    assert failed == pytest.approx(600 * 0.9 / 3600)  # the 600 s minimum of one start
    assert r.total_usd is not None
    assert r.oom_risk_usd == pytest.approx(failed + r.total_usd)


def test_a_row_that_fits_with_margin_carries_no_risk() -> None:
    job, model = _at_one_percent()
    r = pick(job, model, [offer_5090()], today=TODAY).rows[0]
    assert r.fit_verdict == FITS and r.oom_risk_usd == 0.0


def test_the_margin_flag_from_the_command_line(tmp_path: Any) -> None:
    """A real `gpuscout estimate` run: --margin out of range is a three-part error, not a traceback;
    --margin 60 makes an H100 with 60% headroom on the default job tight."""
    import os
    import subprocess
    import sys

    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "COLUMNS": "80"}
    bad = subprocess.run([sys.executable, "-m", "gpuscout", "estimate", "--gpu", "h100-sxm", "--margin", "600"],
                         capture_output=True, text=True, env=env, timeout=300, check=False)
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert "--margin 600 is out of range" in bad.stderr + bad.stdout and "To fix:" in bad.stderr + bad.stdout
    job, model, _ = job_and_model(None)
    b = estimate_memory(job, model, find_gpu("h100-sxm"))
    share = b.headroom_bytes / b.peak_bytes * 100  # the headroom as % of the peak (about 60%)
    for margin, shown in ((share - 1, "yes"), (share + 1, "tight")):
        done = subprocess.run([sys.executable, "-m", "gpuscout", "estimate", "--gpu", "h100-sxm", "--margin",
                               f"{margin:.2f}"], capture_output=True, text=True, env=env, timeout=300, check=False)
        assert done.returncode == 0, done.stderr
        row = next(line for line in done.stdout.splitlines() if line.startswith("│ h100-sxm5-80gb"))
        assert f"│ {shown} " in row


def test_a_group_measured_with_two_setups_applies_only_to_jobs_with_both() -> None:
    """The SDXL run with VAE slicing and sequential offload together says nothing of a job that only slices."""
    margins = Margins(derivation={}, rows=(
        BandRow(category="image_peak", setup="all", band=0.17, points=4, sources=("a",), worst="x"),
        BandRow(category="image_peak", setup="vae slicing", band=0.60, points=1, sources=("a",), worst="y"),
        BandRow(category="image_peak", setup="cpu offload + vae slicing", band=2.68, points=1, sources=("a",),
                worst="z"),
    ))
    job, _, _ = job_and_model("sdxl-1024")
    assert isinstance(job, ImageJob)
    assert band_for(job, margins=margins).fraction == 0.17
    slicing = job.model_copy(update={"vae_slicing": True})
    assert band_for(slicing, margins=margins).fraction == 0.60
    both = slicing.model_copy(update={"offload": "sequential"})
    assert band_for(both, margins=margins).fraction == 2.68
