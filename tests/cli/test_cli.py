"""The CLI as a user runs it: real subprocesses, real exit codes, JSON that scripts can rely on."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).parent.parent.parent / "examples"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuscout", *args], capture_output=True, text=True,
                          timeout=120, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})


def test_help_lists_the_commands() -> None:
    out = run("--help")
    assert out.returncode == 0
    for command in ("estimate", "model", "gpus"):
        assert command in out.stdout


def test_model_json_has_the_integer_fields_scripts_rely_on() -> None:
    out = run("model", "llama-3-8b", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["params_total"] == 8_030_261_248
    assert data["params_active"] == data["params_total"]
    assert data["kv_cache_bytes_per_token"] == 131_072
    assert all(isinstance(data[k], int) for k in ("params_total", "params_active", "kv_cache_bytes_per_token"))


def test_model_accepts_a_config_file(tmp_path: Path) -> None:
    config = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000,
              "max_position_embeddings": 512}
    (tmp_path / "config.json").write_text(json.dumps(config))
    out = run("model", str(tmp_path), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["kv_cache_bytes_per_token"] == 2 * 2 * 2 * 16 * 2


def test_estimate_json_for_an_example() -> None:
    out = run("estimate", str(EXAMPLES / "llama3-70b-serving-8k.toml"), "--gpu", "h100", "--json")
    assert out.returncode == 0, out.stderr
    verdict = json.loads(out.stdout)["screening"]["verdicts"][0]
    assert verdict["gpu_sku"] == "h100-sxm5-80gb" and verdict["fits"] is True
    assert verdict["limits"]["values"]["concurrency"] >= 16


def test_default_estimate_prints_a_table_for_every_gpu() -> None:
    out = run("estimate")
    assert out.returncode == 0, out.stderr
    assert "rtx-4090" in out.stdout and "h200-sxm-141gb" in out.stdout


def test_unknown_gpu_suggests_and_exits_1_without_traceback() -> None:
    out = run("estimate", "--gpu", "h10")
    assert out.returncode == 1
    assert "Did you mean" in out.stderr and "Traceback" not in out.stderr


def test_unknown_model_suggests() -> None:
    out = run("model", "llama-3-8")
    assert out.returncode == 1 and "llama-3-8b" in out.stderr and "Traceback" not in out.stderr


def test_bad_toml_exits_1_and_names_the_line(tmp_path: Path) -> None:
    spec = tmp_path / "bad.toml"
    spec.write_text('kind = "image"\nmodel = "sdxl"\nwidth = \n')
    out = run("estimate", str(spec))
    assert out.returncode == 1 and "line 3" in out.stderr and "Traceback" not in out.stderr


def test_missing_spec_file_is_a_user_error(tmp_path: Path) -> None:
    out = run("estimate", str(tmp_path / "nope.toml"))
    assert out.returncode == 1 and "To fix" in out.stderr


def test_model_reads_exact_weight_bytes_from_a_checkpoint(tmp_path: Path) -> None:
    import numpy as np
    from safetensors.numpy import save_file

    config = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
              "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 100,
              "max_position_embeddings": 256}
    (tmp_path / "config.json").write_text(json.dumps(config))
    save_file({"a": np.zeros((100, 64), dtype=np.float16), "b": np.zeros((10,), dtype=np.float32)},
              str(tmp_path / "model.safetensors"))
    out = run("model", str(tmp_path), "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["weight_bytes_by_format"]["checkpoint (exact)"] == 100 * 64 * 2 + 10 * 4
    assert data["shape"]["checkpoint"]["by_dtype"][0]["dtype"] == "F16"


def test_pick_ranks_the_example_sheet() -> None:
    out = run("pick", str(EXAMPLES / "llama3-8b-qlora.toml"), "--offers", str(EXAMPLES / "prices.example.toml"),
              "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)["pick"]["rows"]
    ranked = [r for r in rows if r["excluded"] is None]
    assert ranked and [r["total_usd"] for r in ranked] == sorted(r["total_usd"] for r in ranked)
    assert all(r["excluded"] for r in rows[len(ranked):])


def test_pick_deadline_and_budget_exclude_with_reasons() -> None:
    out = run("pick", str(EXAMPLES / "llama3-8b-qlora.toml"), "--offers", str(EXAMPLES / "prices.example.toml"),
              "--deadline", "1h", "--budget", "10", "--json")
    assert out.returncode == 4, out.stderr  # every offer excluded: no admissible option (docs/design.md §4)
    reasons = [r["excluded"] for r in json.loads(out.stdout)["pick"]["rows"] if r["excluded"]]
    assert any("deadline" in r for r in reasons) and any("budget" in r for r in reasons)


def test_cost_calculator_json_total() -> None:
    out = run("cost", "--usd-per-gpu-hour", "2.5", "--gpus", "8", "--hours", "10", "--storage-usd", "5",
              "--transfer-usd", "1", "--retry-usd", "4", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["total_usd"] == 2.5 * 8 * 10 + 5 + 1 + 4


def test_cost_shows_how_billing_rules_change_the_bill() -> None:
    out = run("cost", "--usd-per-gpu-hour", "2", "--gpus", "1", "--hours", "0.25", "--min-billed-s", "3600",
              "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["total_usd"] == 0.5 and data["billed"]["total_usd"] == 2.0


def test_cost_of_an_offer_from_a_sheet() -> None:
    out = run("cost", "--offers", str(EXAMPLES / "prices.example.toml"), "--offer", "lambda-h100-sxm-1x",
              "--hours", "2", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["total"] > 2 * 4.29


def test_cost_bad_input_is_a_user_error() -> None:
    for args in (("--usd-per-gpu-hour", "-1", "--hours", "1"), ("--usd-per-gpu-hour", "1"),
                 ("--offers", str(EXAMPLES / "prices.example.toml"), "--offer", "lambda-h100", "--hours", "1")):
        out = run("cost", *args)
        assert out.returncode == 1 and "To fix" in out.stderr and "Traceback" not in out.stderr, args


def test_pick_bad_price_sheet_is_a_user_error(tmp_path: Path) -> None:
    sheet = tmp_path / "prices.toml"
    sheet.write_text('[[offer]]\nid = "x"\nprovider = "p"\ngpu = "h100"\ngpu_count = 1\nprice = -1.0\n'
                     'price_basis = "gpu"\ncurrency = "USD"\nobserved_at = 2026-11-01\nsource = "quote"\n')
    out = run("pick", "--offers", str(sheet))
    assert out.returncode == 1 and "price" in out.stderr and "Traceback" not in out.stderr
