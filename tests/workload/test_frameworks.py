"""The framework as part of a fine-tune job (workload/frameworks.toml): each trainer's defaults resolve as
the data file documents them, a field the spec writes wins, a spec without `framework` means what it
meant before, and the checkpointing policies and loss implementations order the memory as their
mechanisms say (docs/estimator.md, Frameworks)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from gpuscout.errors import SpecError
from gpuscout.estimator.screen import screen
from gpuscout.estimator.training import estimate_finetune_memory, trainable_params
from gpuscout.hardware.catalog import find_gpu
from gpuscout.report.payload import estimate_payload
from gpuscout.workload.frameworks import frameworks, resolve
from gpuscout.workload.job import FinetuneJob, load_job, parse_job
from gpuscout.workload.presets import load_llm_preset
from gpuscout.workload.resolve import resolve_llm

ROOT = Path(__file__).parents[2]
LLAMA = load_llm_preset("llama-3-8b")
H100 = find_gpu("h100")
BASE: dict[str, Any] = {"kind": "finetune", "model": "llama-3-8b", "method": "lora", "micro_batch": 2,
                        "seq_len": 4096, "attention": "flash"}


def job(**kw: Any) -> FinetuneJob:
    parsed = parse_job({**BASE, **kw})
    assert isinstance(parsed, FinetuneJob)
    return parsed


def peak(j: FinetuneJob) -> int:
    return estimate_finetune_memory(j, LLAMA, H100).peak_bytes


def _field(j: FinetuneJob, dotted: str) -> Any:
    value: Any = j
    for part in dotted.split("."):
        value = getattr(value, part)
    return list(value) if isinstance(value, tuple) else value


def test_the_data_file_lists_every_agreed_id_each_default_with_a_source() -> None:
    assert set(frameworks()) == {"transformers", "torchtune", "torchtitan", "litgpt", "unsloth", "axolotl",
                                 "llama-factory", "accelerate-fsdp", "deepspeed"}
    for fw in frameworks().values():
        for fv in fw.versions.values():
            assert fv.defaults, fv.ref
            assert all(len(d.source) > 20 for d in fv.defaults), fv.ref


@pytest.mark.parametrize("ref", [fv.ref for fw in frameworks().values() for fv in fw.versions.values()])
def test_each_framework_default_resolves_as_the_data_file_documents(ref: str) -> None:
    """Read straight from the TOML (not through the loader), so a loader bug cannot hide here."""
    fid, version = ref.split("@")
    raw = tomllib.loads((ROOT / "src/gpuscout/workload/frameworks.toml").read_text())[fid]["versions"][version]
    j = job(framework=ref, method="qlora", gradient_checkpointing=True)
    assert j.framework == ref
    for dotted, entry in raw["defaults"].items():
        assert _field(j, dotted) == entry["value"], (ref, dotted)


def test_without_a_version_the_latest_is_used_and_recorded() -> None:
    fw = frameworks()["torchtune"]
    assert job(framework="torchtune").framework == f"torchtune@{fw.latest}"


def test_a_field_the_spec_writes_wins_over_the_framework() -> None:
    j = job(framework="torchtune", method="qlora", precision="bf16_mixed", upcast_unquantized=True, loss="full")
    assert (j.precision, j.upcast_unquantized, j.loss_impl) == ("bf16_mixed", True, "full")
    u = job(framework="unsloth", method="qlora", gradient_checkpointing=False)
    assert not u.gradient_checkpointing and not u.activation_offload  # its checkpointing-only defaults stay off
    t = job(framework="torchtitan", checkpoint_policy="selective_op")
    assert (t.checkpoint_policy, t.checkpoint_layer_interval) == ("selective_op", 1)
    lit = job(framework="litgpt", lora={"target_modules": "all-linear"})
    assert lit.lora.target_modules == "all-linear" and not lit.lora.output_head


def test_framework_defaults_move_the_estimate_the_way_their_mechanism_says() -> None:
    plain = job(method="qlora")
    named = job(framework="transformers", method="qlora")
    assert named.model_copy(update={"framework": None, "loss": None}) == plain and named.loss_impl == "full"
    # A spec's chunked_cross_entropy is its loss: no framework's loss default overrides it.
    assert job(framework="transformers", chunked_cross_entropy=True).loss_impl == "fused"
    assert peak(job(framework="transformers", method="qlora")) == peak(plain)
    # torchtune: bf16 everywhere, no fp32 upcast, chunked output loss: lower than peft's defaults.
    assert peak(job(framework="torchtune", method="qlora")) < peak(plain)
    # no upcast alone: the 16-bit leftovers are half the fp32 ones.
    assert peak(job(method="qlora", upcast_unquantized=False)) < peak(plain)


def test_a_spec_without_framework_estimates_as_before_on_every_finetune_example() -> None:
    """The new keys appear in the job at values that change nothing, and naming the default trainer
    (transformers, today's behaviour) gives the same screening byte for byte."""
    for path in sorted((ROOT / "examples").glob("*.toml")):
        spec = tomllib.loads(path.read_text())
        if spec.get("kind") != "finetune":
            continue
        before = load_job(path)
        assert isinstance(before, FinetuneJob)
        assert (before.framework, before.loss, before.checkpoint_layer_interval, before.lora.output_head) \
            == (None, None, 1, False)
        named = parse_job({**spec, "framework": "transformers"})
        model = resolve_llm(before.model, base_dir=path.parent)
        gpus = [find_gpu("h100"), find_gpu("rtx4090")]
        old = estimate_payload(before, screen(before, model, gpus))["screening"]
        new = estimate_payload(named, screen(named, model, gpus))["screening"]
        assert new.pop("framework").startswith("transformers@") and "framework" not in old
        assert new == old, path.name
        # The keys frameworks added stay out of the dump at their unused values: the JSON is as before.
        dumped = before.model_dump()
        assert not {"framework", "loss", "checkpoint_layer_interval"} & set(dumped), path.name
        assert "output_head" not in dumped["lora"] and parse_job(dumped) == before


def test_checkpointing_policies_order_the_memory_as_they_save() -> None:
    """none keeps everything; "selective" (every matmul) keeps more than torchtitan's op-level policy
    (every other matmul); every k-th layer keeps more as k grows; full keeps only layer inputs."""
    none = peak(job())
    every_mm = peak(job(gradient_checkpointing=True, checkpoint_policy="selective"))
    op = peak(job(gradient_checkpointing=True, checkpoint_policy="selective_op"))
    k2, k4 = (peak(job(gradient_checkpointing=True, checkpoint_policy="selective_layers",
                       checkpoint_layer_interval=k)) for k in (2, 4))
    full = peak(job(gradient_checkpointing=True))
    assert none > every_mm > op > full
    assert none > k4 > k2 > full
    # k = 1 is every layer: the same as full checkpointing.
    assert peak(job(gradient_checkpointing=True, checkpoint_policy="selective_layers")) == full


def test_op_level_policy_saves_q_v_gate_and_down_of_a_llama_layer() -> None:
    from gpuscout.estimator.activations import op_level_saved_bytes

    s = LLAMA
    q, kv = s.num_attention_heads * s.head_dim, s.num_kv_heads * s.head_dim
    mm = 2 * (q + kv + s.intermediate_size + s.hidden_size)  # 1st, 3rd, 5th, 7th matmul outputs, bf16
    attention = 2 * q + 4 * s.num_attention_heads  # SDPA output and its fp32 log-sum-exp
    assert op_level_saved_bytes(s, 2, 1) == mm + attention
    # LoRA on every linear adds x·A and (x·A)·B after each base matmul; the base ones saved stay the same.
    lora = op_level_saved_bytes(s, 2, 1, {n: 16 for n in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                          "up_proj", "down_proj")})
    assert lora > mm + attention


def test_loss_implementations_order_the_logits_memory() -> None:
    full, chunked, fused = (peak(job(loss=loss)) for loss in ("full", "chunked_output", "fused"))
    assert full > chunked > fused
    assert peak(job(chunked_cross_entropy=True)) == fused
    with pytest.raises(SpecError, match="keep only loss"):
        job(loss="full", chunked_cross_entropy=True)


def test_lora_on_the_output_head_adds_its_adapter_and_states() -> None:
    plain, head = job(), job(lora={"output_head": True})
    assert trainable_params(head, LLAMA) - trainable_params(plain, LLAMA) \
        == 16 * (LLAMA.hidden_size + LLAMA.vocab_size)
    assert peak(head) > peak(plain)


def test_an_unknown_framework_says_what_it_knows_and_the_close_one() -> None:
    with pytest.raises(SpecError, match="Did you mean 'torchtune'"):
        job(framework="torchtun")
    with pytest.raises(SpecError, match=r"versions 0\.6"):
        resolve("torchtune@9.9")


def test_a_bad_framework_errors_cleanly_through_the_cli(tmp_path: Path) -> None:
    spec = tmp_path / "job.toml"
    spec.write_text('kind = "finetune"\nmodel = "llama-3-8b"\nframework = "unslot"\n')
    done = subprocess.run([sys.executable, "-m", "gpuscout", "estimate", str(spec)], capture_output=True, text=True,
                          timeout=300)
    # Every user error of the CLI exits 1 with what / why / to fix (cli/app.py main), never a traceback.
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert "Unknown framework 'unslot'" in done.stderr and "'unsloth'" in done.stderr


def test_each_policy_recomputes_what_it_did_not_save() -> None:
    """Full checkpointing runs the layers' forward again, every-k-th-layer ⌊L/k⌋ of L of it, op-level
    the unsaved matmuls (k, o, up of a Llama layer), the every-matmul policy nothing that counts."""
    from gpuscout.workload.flops import training_flops

    s = LLAMA
    none = training_flops(job(), s)
    extra = {name: training_flops(job(gradient_checkpointing=True, **kw), s).total - none.total for name, kw in {
        "full": {}, "every_mm": {"checkpoint_policy": "selective"},
        "k2": {"checkpoint_policy": "selective_layers", "checkpoint_layer_interval": 2},
        "op": {"checkpoint_policy": "selective_op"}}.items()}
    assert extra["every_mm"] == 0
    assert extra["k2"] == pytest.approx(extra["full"] * (s.num_layers // 2) / s.num_layers)
    q, kv = s.num_attention_heads * s.head_dim, s.num_kv_heads * s.head_dim
    h, f = s.hidden_size, s.intermediate_size
    share = (h * kv + q * h + h * f) / (h * q + 2 * h * kv + q * h + 3 * h * f)
    assert extra["op"] == pytest.approx(share * none.linear_fwd)
    assert 0 < extra["op"] < extra["k2"] < extra["full"]
