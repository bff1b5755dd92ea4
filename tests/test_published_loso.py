"""Leave-one-source-out finds the constants a source set from the points' `informs` fields (no list kept
in the benchmark), refits them without that source, restores them; the unsafe share and the "sources
used in no constant" statistics; a point's `framework` reaches the job only where gpuscout knows it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from benchmark_script import load_benchmark
from gpuscout.estimator import efficiency, overhead

REPO = Path(__file__).resolve().parent.parent
SIDE = REPO / "benchmarks" / "published" / "gpuscout_side.py"
IMAGE_JOB = {"kind": "image", "model": "sd15", "width": 512, "height": 512, "steps": 2, "batch": 1}


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_benchmark("published_error")


def image_point(pid: str, source: str, measured: float, informs: list[str] | None = None, width: int = 512) -> str:
    lines = ["[[point]]", f'id = "{pid}"', 'category = "image_peak"', 'gpu = "a100-sxm4-40gb"',
             'quantity = "peak_allocated_gib"', f"measured = {measured!r}", 'what = "hand-made"',
             f'source = "{source}"', 'quote = "x GiB"', 'conditions = "fp16"', "certain = true", 'notes = ""']
    if informs is not None:
        lines.append("informs = [" + ", ".join(json.dumps(i) for i in informs) + "]")
    job = {**IMAGE_JOB, "width": width, "height": width}
    lines += ["[point.job]", *(f"{k} = {json.dumps(v)}" for k, v in job.items())]
    return "\n".join(lines) + "\n"


def estimate_at(workspace: float, width: int) -> float:
    """gpuscout's estimate of the hand-made image point with CONV_WORKSPACE_INPUTS at `workspace`."""
    from published import loso
    from published.gpuscout_side import estimate_point

    wire = {"id": "x", "category": "image_peak", "gpu": "a100-sxm4-40gb", "quantity": "peak_allocated_gib",
            "measured": 1.0, "conditions": "", "job": {**IMAGE_JOB, "width": width, "height": width}}
    with loso.patched({loso.resolve("overhead.CONV_WORKSPACE_INPUTS"): workspace}):
        value = estimate_point(wire)["value"]
    assert isinstance(value, float)
    return value


def test_references_resolve_to_live_values_and_patching_restores_them(bench: ModuleType) -> None:
    from published import loso

    assert loso.reference("overhead.CONV_WORKSPACE_INPUTS (cuDNN workspace, sized after these runs)") == \
        "overhead.CONV_WORKSPACE_INPUTS"
    row = "efficiency._table()['default']['image']['compute']"
    assert loso.reference(row + " (efficiency.toml image row, compute 0.4)") == row
    table = loso.resolve(row)
    plain = loso.resolve("speed.image.CUDA_CORE_GEMM_EFFICIENCY")
    before = (table.get(), plain.get(), overhead.CONV_WORKSPACE_INPUTS)
    with loso.patched({table: 0.9, plain: 0.1, loso.resolve("overhead.CONV_WORKSPACE_INPUTS"): 3.0}):
        assert efficiency._table()["default"]["image"]["compute"] == 0.9
        assert overhead.CONV_WORKSPACE_INPUTS == 3.0
    assert (table.get(), plain.get(), overhead.CONV_WORKSPACE_INPUTS) == before
    for bad in ("overhead.NO_SUCH_CONSTANT", "efficiency.toml", "nowhere.X", "efficiency._table()",
                "efficiency._table()['default']['image']['source']"):
        with pytest.raises(loso.UnresolvedConstant):
            loso.resolve(bad)


def test_a_source_is_predicted_with_the_constant_fitted_on_the_others(bench: ModuleType, tmp_path: Path) -> None:
    """Source B's runs sit exactly where CONV_WORKSPACE_INPUTS = 2 puts them; source A set the constant.
    Without A, the rule recovers 2 from B, and A is predicted at 2; B informed nothing and keeps its
    in-sample estimate; C names a constant that does not exist and gets no LOSO figure; the committed
    value is back afterwards."""
    from published import loso
    from published.gpuscout_side import estimate_point  # noqa: F401  (imported for its module state)

    folder = tmp_path / "points"
    folder.mkdir()
    points = [image_point("a-512", "https://example.org/a", 2.0, ["overhead.CONV_WORKSPACE_INPUTS (set here)"]),
              image_point("b-512", "https://example.org/b", estimate_at(2.0, 512)),
              image_point("b-768", "https://example.org/b", estimate_at(2.0, 768), width=768),
              image_point("c-512", "https://example.org/c", 2.5, ["overhead.NO_SUCH_CONSTANT"])]
    (folder / "image_peak.toml").write_text("\n".join(points), encoding="utf-8")
    found, errors = bench.load_points(folder)
    assert not errors
    rows = bench.estimate_rows(found, [])
    result = loso.apply(rows)
    by_id = {r.point.id: r for r in rows}
    workspace = loso.resolve("overhead.CONV_WORKSPACE_INPUTS")
    assert result.constants == [workspace] and result.informed_by[workspace] == ["https://example.org/a"]
    assert result.without[workspace]["https://example.org/a"] == pytest.approx(2.0)
    assert by_id["a-512"].loso == pytest.approx(estimate_at(2.0, 512))
    assert by_id["a-512"].loso != by_id["a-512"].after["value"]
    assert by_id["b-512"].loso == by_id["b-512"].after["value"]
    assert by_id["c-512"].loso is None and "NO_SUCH_CONSTANT" in by_id["c-512"].loso_note
    assert "overhead.NO_SUCH_CONSTANT" in result.unresolved
    assert overhead.CONV_WORKSPACE_INPUTS == 1.0
    assert result.used_sources() == {"https://example.org/a", "https://example.org/c"}


def test_sources_cited_by_gpuscout_count_as_used() -> None:
    from published import loso

    cited = loso.cited_sources(["huggingface/blog:simple_sdxl_optimizations.md", "https://example.org/nothing",
                                "someone/repo:README.md"])
    assert "gpuscout/estimator/efficiency.toml" in cited["huggingface/blog:simple_sdxl_optimizations.md"]
    assert set(cited) == {"huggingface/blog:simple_sdxl_optimizations.md"}  # a bare README names no source


def test_the_unsafe_share_counts_points_more_than_five_percent_on_the_unsafe_side() -> None:
    from published.report import stats

    memory = stats("training_peak", [-0.06, -0.04, 0.10, -0.051])
    assert memory.unsafe_share == pytest.approx(3 / 4) and memory.unsafe5_share == pytest.approx(2 / 4)
    longest = stats("max_seq_len", [0.06, 0.04, -0.2])
    assert longest.unsafe5_share == pytest.approx(1 / 3)
    assert stats("speed", [-0.5, 0.5]).unsafe5_share is None


def test_the_report_states_the_targets_on_sources_used_in_no_constant(bench: ModuleType, tmp_path: Path) -> None:
    folder = tmp_path / "points"
    folder.mkdir()
    points = [image_point("a-512", "https://example.org/a", 2.0, ["overhead.CONV_WORKSPACE_INPUTS (set here)"]),
              image_point("d-512", "https://example.org/d", estimate_at(1.0, 512) * 1.2),  # 1/1.2 − 1: 16.7% under
              image_point("d-768", "https://example.org/d", estimate_at(1.0, 768) * 1.01, width=768)]
    (folder / "image_peak.toml").write_text("\n".join(points), encoding="utf-8")
    out = tmp_path / "published.md"
    assert bench.main(["--points", str(folder), "--out", str(out), "--no-peers"]) == 0
    text = out.read_text(encoding="utf-8")
    assert "| unsafe (LOSO) | unsafe >5% (LOSO) |" in text
    assert "Sources used in no constant (1, with counted points): https://example.org/d." in text
    # d's two points: one 16.7% under, one 1% under -> half of the memory points more than 5% under
    assert "| memory points, all categories | ≤ 1 in 10 more than 5% under | 2 | 50.0% | missed |" in text
    assert "| training_peak | median \\|err\\| ≤ 10% | 0 | – | no data |" in text
    assert re.search(r"\| `overhead\.CONV_WORKSPACE_INPUTS` \| https://example\.org/a \| 3 points \| 1 \|", text)


# ------------------------------------------------------------------------ framework --------------

FINETUNE = {"kind": "finetune", "model": "llama-3.2-1b", "method": "lora", "micro_batch": 1, "seq_len": 512}


def test_the_framework_is_not_passed_where_the_job_has_no_such_field(bench: ModuleType) -> None:
    from published.gpuscout_side import estimate_point, with_framework

    from gpuscout.workload.job import FinetuneJob

    if "framework" in FinetuneJob.model_fields:
        pytest.skip("this gpuscout's finetune job has a framework field (see the subprocess test)")
    wire = {"id": "x", "category": "training_peak", "gpu": "h100-sxm5-80gb", "quantity": "peak_allocated_gib",
            "measured": 5.0, "conditions": "", "job": FINETUNE, "framework": "torchtune"}
    assert with_framework(dict(FINETUNE), "torchtune") == (FINETUNE, None)
    result = estimate_point(wire)
    assert result["status"] == "ok" and result["framework"] is None
    assert result["value"] == estimate_point({**wire, "framework": None})["value"]


def _tree_with_a_framework_field(tmp_path: Path) -> Path:
    """A copy of this gpuscout whose finetune job has a `framework` field and a frameworks module that
    knows one id, the way the frameworks data file works (an unknown id is a SpecError). Where this
    gpuscout already has the field and its frameworks data file, the test runs on this tree itself."""
    from gpuscout.workload.job import FinetuneJob

    if "framework" in FinetuneJob.model_fields:
        return REPO
    tree = tmp_path / "tree"
    shutil.copytree(REPO / "src", tree / "src", ignore=shutil.ignore_patterns("__pycache__"))
    job_py = tree / "src" / "gpuscout" / "workload" / "job.py"
    text = job_py.read_text(encoding="utf-8")
    anchor = 'class FinetuneJob(Spec):\n    kind: Literal["finetune"]\n'
    assert anchor in text
    job_py.write_text(text.replace(anchor, anchor + "    framework: str | None = None\n"), encoding="utf-8")
    (tree / "src" / "gpuscout" / "workload" / "frameworks.py").write_text(
        "from gpuscout.errors import SpecError\n\n\n"
        "def resolve(ref: str) -> str:\n"
        "    if ref.partition('@')[0] != 'litgpt':\n"
        "        raise SpecError(f'Unknown framework {ref!r}.', 'only litgpt here', 'use litgpt')\n"
        "    return ref\n", encoding="utf-8")
    return tree


def test_the_framework_is_passed_where_the_job_has_the_field_and_knows_the_id(tmp_path: Path) -> None:
    """Under a gpuscout whose job has the field (run as the baseline side does, in its own interpreter):
    a known id is passed, an unknown one is not, and the spec's own framework wins."""
    tree = _tree_with_a_framework_field(tmp_path)
    base = {"category": "training_peak", "gpu": "h100-sxm5-80gb", "quantity": "peak_allocated_gib",
            "measured": 5.0, "conditions": ""}
    wires = [{**base, "id": "known", "job": FINETUNE, "framework": "litgpt"},
             {**base, "id": "unknown", "job": FINETUNE, "framework": "fsdp-qlora"},
             {**base, "id": "own", "job": {**FINETUNE, "framework": "litgpt@0.5"}, "framework": "torchtune"},
             {**base, "id": "none", "job": FINETUNE}]
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    done = subprocess.run([sys.executable, str(SIDE)], input=json.dumps(wires), capture_output=True, text=True,
                          env=env, check=False, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout)
    assert Path(answer["gpuscout"]).resolve().is_relative_to((tree / "src").resolve())
    results: dict[str, Any] = {r["id"]: r for r in answer["results"]}
    assert all(r["status"] == "ok" for r in results.values()), results
    assert results["known"]["framework"] == "litgpt"
    assert results["unknown"]["framework"] is None and results["none"]["framework"] is None
    assert results["own"]["framework"] is None  # the spec said litgpt@0.5 itself; the point's id is not forced
