"""The published-error benchmark (benchmarks/published_error.py): the point format and its loader, the
mapping from a measured quantity to gpuscout's estimate, the error arithmetic and the report."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from benchmark_script import load_benchmark
from gpuscout.estimator.memory import estimate_memory
from gpuscout.hardware.catalog import find_gpu
from gpuscout.workload.image import load_image_preset
from gpuscout.workload.job import parse_job
from gpuscout.workload.presets import load_llm_preset

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "benchmarks" / "published_error.py"
POINTS = REPO / "validation" / "published"
GIB = 2**30


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_benchmark("published_error")


def point_toml(**overrides: Any) -> str:
    """One weights point in the shared format (Llama 3 8B in bf16); `overrides` replace or drop keys."""
    fields: dict[str, Any] = {
        "id": "hand-llama3-8b-bf16-weights", "category": "weights", "gpu": "", "quantity": "weights_gib",
        "measured": 15.0, "what": "hand-made", "source": "https://example.org/x", "quote": "15.0 GiB",
        "conditions": "bf16", "certain": True, "notes": "",
    }
    fields.update(overrides)
    lines = ["[[point]]"]
    for key, value in fields.items():
        if value is None:
            continue
        shown = ("true" if value else "false") if isinstance(value, bool) else (
            f'"{value}"' if isinstance(value, str) else repr(value))
        lines.append(f"{key} = {shown}")
    lines += ["[point.job]", 'kind = "inference"', 'model = "llama-3-8b"', 'weights = "bf16"']
    return "\n".join(lines) + "\n"


def write_points(folder: Path, name: str, *points: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("\n".join(points), encoding="utf-8")
    return path


# ------------------------------------------------------------------------ loader -----------------

def test_a_malformed_point_is_an_error_naming_its_file_and_id(bench: ModuleType, tmp_path: Path) -> None:
    path = write_points(tmp_path, "weights.toml", point_toml(measured=None),
                        point_toml(id="second-point", certain="yes"), point_toml(id="fine-point"))
    points, errors = bench.load_points(tmp_path)
    assert [p.id for p in points] == ["fine-point"]  # the good point still loads
    messages = [str(e) for e in errors]
    assert len(messages) == 2
    assert str(path) in messages[0] and "'hand-llama3-8b-bf16-weights'" in messages[0]
    assert "missing key(s): measured" in messages[0]
    assert "'second-point'" in messages[1] and "certain must be bool" in messages[1]


@pytest.mark.parametrize(("override", "problem"), [
    ({"category": "speed"}, "differs from the file's"),
    ({"quantity": "weights_tib"}, "unknown quantity"),
    ({"id": "Not_Kebab"}, "kebab-case"),
    ({"measured": -1.0}, "must be positive"),
    ({"quote": "x" * 201}, "at most 200"),
    ({"colour": "red"}, "unknown key(s): colour"),
])
def test_each_format_rule_is_checked(bench: ModuleType, tmp_path: Path, override: dict[str, Any],
                                     problem: str) -> None:
    write_points(tmp_path, "weights.toml", point_toml(**override))
    _, errors = bench.load_points(tmp_path)
    assert len(errors) == 1 and problem in str(errors[0])


def test_duplicate_ids_and_unknown_gpus_are_format_errors(bench: ModuleType, tmp_path: Path) -> None:
    write_points(tmp_path, "weights.toml", point_toml(), point_toml())
    _, errors = bench.load_points(tmp_path)
    assert any("id also used in" in str(e) for e in errors)
    points, _ = bench.load_points(write_points(tmp_path / "b", "weights.toml", point_toml(gpu="a100-sxm-99gb")).parent)
    assert "not in gpuscout's catalog" in str(bench.check_gpus(points)[0])


def test_the_run_reports_format_errors_and_goes_on(bench: ModuleType, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "points"
    write_points(folder, "weights.toml", point_toml(), point_toml(id="broken", measured="a lot"))
    out = tmp_path / "published.md"
    assert bench.main(["--points", str(folder), "--out", str(out), "--no-peers"]) == 1
    assert "format error:" in capsys.readouterr().err
    text = out.read_text(encoding="utf-8")
    assert "| weights | 1/1 |" in text and "format:" in text and "'broken'" in text


# ------------------------------------------------------------------------ the real point files ---

def test_every_published_file_loads_and_every_certain_point_estimates_or_is_inexpressible(
        bench: ModuleType) -> None:
    points, errors = bench.load_points(POINTS)
    errors += bench.check_gpus(points)
    assert errors == []
    assert points, "validation/published/ holds no points"
    failed = []
    for point in points:
        if not point.certain:
            continue
        result = bench.estimate_point(point.to_wire())
        if result["status"] == "ok":
            assert result["value"] > 0, point.id
        elif result["status"] != "inexpressible":
            failed.append(f"{point.id}: {result['detail']}")
    assert failed == []


# ------------------------------------------------------------------------ the mapping ------------

def wire(quantity: str, job: dict[str, Any], gpu: str = "a100-sxm4-40gb", category: str = "image_peak") -> dict[
        str, Any]:
    return {"id": "hand", "category": category, "gpu": gpu, "quantity": quantity, "measured": 1.0, "conditions": "",
            "job": job}


def test_a_weights_point_is_the_parameter_bytes(bench: ModuleType) -> None:
    # Llama 3 8B from its config: per layer q,o (h²) + k,v (h × 8 heads × 128) + 3 MLP matrices + 2 norms;
    # untied embeddings and lm_head; the final norm.
    h, layers, ffn, vocab = 4096, 32, 14336, 128256
    params = layers * (2 * h * h + 2 * h * 8 * 128 + 3 * h * ffn + 2 * h) + 2 * vocab * h + h
    assert params == 8_030_261_248
    job = {"kind": "inference", "model": "llama-3-8b", "weights": "bf16"}
    gib = bench.estimate_point(wire("weights_gib", job, gpu="", category="weights"))
    gb = bench.estimate_point(wire("weights_gb", job, gpu="", category="weights"))
    assert gib["value"] == pytest.approx(params * 2 / GIB)
    assert gb["value"] == pytest.approx(params * 2 / 1e9)


def test_peak_statistics_drop_what_each_measurement_does_not_see(bench: ModuleType) -> None:
    job = {"kind": "image", "model": "sdxl", "width": 1024, "height": 1024, "steps": 25, "batch": 1, "dtype": "fp16"}
    breakdown = estimate_memory(parse_job(job), load_image_preset("sdxl"), find_gpu("a100-sxm4-40gb"))
    terms = {t.name: t.bytes for t in breakdown.terms}
    value = {q: bench.estimate_point(wire(f"{q}_mib", job))["value"] * 2**20
             for q in ("nvidia_smi", "peak_reserved", "peak_allocated")}
    assert value["nvidia_smi"] == pytest.approx(breakdown.peak_bytes)
    assert value["nvidia_smi"] - value["peak_reserved"] == pytest.approx(terms["CUDA context and libraries"])
    assert value["peak_reserved"] - value["peak_allocated"] == pytest.approx(terms["allocator reserve"])


def test_kv_capacity_agrees_with_max_concurrency(bench: ModuleType) -> None:
    job = {"kind": "inference", "model": "llama-3.1-8b", "prompt_tokens": 7000, "output_tokens": 1192,
           "gpu_memory_utilization": 0.9}
    tokens = bench.estimate_point(wire("kv_tokens", job, gpu="l40s", category="kv_capacity"))["value"]
    blocks = bench.estimate_point(wire("kv_blocks", job, gpu="l40s", category="kv_capacity"))["value"]
    seqs = bench.estimate_point(wire("max_concurrency", job, gpu="l40s", category="kv_capacity"))["value"]
    assert tokens == blocks * 16
    assert seqs == pytest.approx(tokens / 8192, rel=1e-3)  # 8,192 tokens a sequence, whole blocks


def test_the_longest_sequence_is_a_multiple_of_256_that_fits(bench: ModuleType) -> None:
    job = {"kind": "finetune", "model": "llama-3.2-1b", "method": "lora", "gradient_checkpointing": True,
           "allow_long_context": True}
    value = int(bench.estimate_point(wire("max_seq_len_tokens", job, gpu="rtx-4090", category="max_seq_len"))["value"])
    assert value % 256 == 0 and value > 0
    gpu, shape = find_gpu("rtx-4090"), load_llm_preset("llama-3.2-1b")
    assert estimate_memory(parse_job({**job, "seq_len": value}), shape, gpu).fits
    assert not estimate_memory(parse_job({**job, "seq_len": value + 256}), shape, gpu).fits


def test_an_unparsable_job_is_inexpressible_with_the_reason(bench: ModuleType) -> None:
    spec = {"kind": "image", "model": "sdxl", "vae_framewise_decode": True}  # a setting the spec does not have
    result = bench.estimate_point(wire("peak_allocated_gib", spec))
    assert result["status"] == "inexpressible" and "vae_framewise_decode" in result["detail"]


# ------------------------------------------------------------------------ arithmetic and report --

def test_error_arithmetic_and_category_statistics() -> None:
    sys.path.insert(0, str(SCRIPT.parent))
    from published.report import error, stats

    assert error(12.0, 10.0) == pytest.approx(0.2)
    assert error(8.0, 10.0) == pytest.approx(-0.2)
    s = stats("training_peak", [0.1, -0.3, 0.05, -0.02])
    assert s.count == 4 and s.median_abs == pytest.approx(0.075)
    assert s.worst == pytest.approx(-0.3) and s.unsafe_share == pytest.approx(0.5)
    longest = stats("max_seq_len", [-0.2, 0.04, 0.12])
    assert longest.worst == pytest.approx(0.12) and longest.unsafe_share == pytest.approx(2 / 3)


def test_the_report_has_the_per_category_table_and_a_before_column(bench: ModuleType, tmp_path: Path) -> None:
    folder = tmp_path / "points"
    write_points(folder, "weights.toml", point_toml())
    out, data = tmp_path / "published.md", tmp_path / "rows.json"
    code = bench.main(["--points", str(folder), "--out", str(out), "--json", str(data), "--no-peers",
                       "--baseline-src", str(REPO), "--baseline-label", "same tree"])
    assert code == 0
    text = out.read_text(encoding="utf-8")
    expected = 8_030_261_248 * 2 / GIB / 15.0 - 1
    assert ("| category | points | before | median \\|err\\| | LOSO | held out | worst | LOSO worst "
            "| unsafe (LOSO) |") in text
    # weights: no constant fitted on them, so the LOSO figures are the in-sample ones
    assert (f"| weights | 1/1 | {abs(expected):.1%} | {abs(expected):.1%} | {abs(expected):.1%} "
            f"| {abs(expected):.1%} (1) | {expected:+.1%} | {expected:+.1%} | 100.0% |") in text
    for category in bench.CATEGORIES:
        assert f"\n| {category} | " in text
    assert "| weights | median \\|err\\| ≤ 1% |" in text and "## 6. Inexpressible points" in text
    assert '"before_error"' in data.read_text(encoding="utf-8")


def test_in_sample_points_are_marked_and_left_out_of_the_held_out_error(bench: ModuleType, tmp_path: Path) -> None:
    """A point a constant was set from (`informs`) is marked ‡ and left out of the held-out column."""
    folder = tmp_path / "points"
    write_points(folder, "weights.toml", point_toml(),
                 point_toml(id="fitted-point", measured=12.0, informs=["a constant set from it"]))
    out = tmp_path / "published.md"
    assert bench.main(["--points", str(folder), "--out", str(out), "--no-peers"]) == 0
    text = out.read_text(encoding="utf-8")
    both = [8_030_261_248 * 2 / GIB / m - 1 for m in (15.0, 12.0)]
    median = (abs(both[0]) + abs(both[1])) / 2
    # "a constant set from it" names no gpuscout value: the source's points get no LOSO figure
    # (never a silent in-sample one), and the report says which reference it could not refit.
    assert f"| weights | 2/2 | {median:.1%} | – | {abs(both[0]):.1%} (1) |" in text
    assert "- `a` (https://example.org/x): 'a': no module 'a'" in text
    assert "| fitted-point ‡ |" in text and "| hand-llama3-8b-bf16-weights |" in text


def test_informs_must_name_the_constants(bench: ModuleType, tmp_path: Path) -> None:
    write_points(tmp_path, "weights.toml", point_toml(informs=[""]))
    points, errors = bench.load_points(tmp_path)
    assert points == [] and "informs must list the constants" in str(errors[0])


def test_hf_mem_runs_offline_against_generated_headers(bench: ModuleType) -> None:
    pytest.importorskip("hf_mem")
    sys.path.insert(0, str(SCRIPT.parent))
    from published.peers import run_peer

    job = {"kind": "inference", "model": "llama-3.2-1b", "weights": "bf16"}
    result = run_peer("hf-mem", wire("weights_gib", job, gpu="", category="weights"))
    # Llama 3.2 1B ties its embeddings: the checkpoint holds each parameter once.
    assert result.value == pytest.approx(load_llm_preset("llama-3.2-1b").params_total * 2 / GIB)


def test_leave_one_out_calibration_learns_a_shared_slowdown(bench: ModuleType, tmp_path: Path) -> None:
    sys.path.insert(0, str(SCRIPT.parent))
    from published import calibrate

    if calibrate.calibration_module() is None:
        pytest.skip("this gpuscout has no calibration API")
    # Two fine-tunes on one GPU that both ran 1.5× slower than the default estimate: fitted on either,
    # the other is predicted at its measured time.
    jobs = {"a": {"kind": "finetune", "model": "llama-3.2-1b", "method": "lora", "micro_batch": 2},
            "b": {"kind": "finetune", "model": "llama-3.2-1b", "method": "full", "micro_batch": 1}}
    points = []
    for name, job in jobs.items():
        step = bench.estimate_point(wire("step_s", job, gpu="h100-sxm5-80gb", category="speed"))["value"]
        body = point_toml(id=f"slow-{name}", category="speed", gpu="h100-sxm5-80gb", quantity="step_s",
                          measured=1.5 * step).split("[point.job]")[0]
        points.append(body + "[point.job]\n" + "\n".join(
            f"{k} = {v!r}".replace("'", '"') for k, v in job.items()) + "\n")
    folder = tmp_path / "points"
    write_points(folder, "speed.toml", *points)
    out, data = tmp_path / "published.md", tmp_path / "rows.json"
    assert bench.main(["--points", str(folder), "--out", str(out), "--json", str(data), "--no-peers"]) == 0
    rows = json.loads(data.read_text(encoding="utf-8"))
    for row in rows:
        assert row["error"] == pytest.approx(1 / 1.5 - 1, abs=1e-6)
        assert row["calibrated"] == pytest.approx(row["measured"], rel=1e-6)
    text = out.read_text(encoding="utf-8")
    assert "| speed, calibrated (leave-one-out) | 2 | 0.0% | – | – | +0.0% |" in text
    assert "| speed, calibrated (leave-one-out) | median \\|err\\| ≤ 10% | 0.0% | met | – |" in text
