"""Training settings (docs/estimator.md §2.14) in real CPU runs of the job's transformers model.

Two kinds of check: the bench runs each setting the CPU can run (and says clearly which it cannot),
and the real step confirms what the estimator assumes about it: selective checkpointing and the
optimizer in the backward compute the same update as the plain step, selective checkpointing
recomputes no matmul FLOPs while full checkpointing recomputes one forward of the layers (counted by
torch's FlopCounterMode and compared with workload/flops.py), padding costs FLOPs in proportion to
the padded row, and the offload hooks copy at most what the host-RAM estimate holds.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from gpuscout.errors import UnsupportedHere
from gpuscout.estimator.host import estimate_host
from gpuscout.measure import bench
from gpuscout.measure.harness import BenchSettings
from gpuscout.measure.llm_finetune import run_finetune_case
from gpuscout.measure.llm_setup import LlmCaseSpec
from gpuscout.workload.flops import training_flops
from gpuscout.workload.hf_config import shape_from_hf_config
from gpuscout.workload.job import FinetuneJob, parse_job

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from gpuscout.torchmodel.llm import (  # noqa: E402 (after the importorskip)
    OffloadLedger,
    build_causal_lm,
    build_optimizer,
    enable_checkpointing,
    offload_activations,
    optimizer_in_backward,
)

EXAMPLES = Path(__file__).parent.parent.parent / "examples"
CONFIG: dict[str, Any] = json.loads((EXAMPLES / "tiny-llama" / "config.json").read_text())
SHAPE = shape_from_hf_config(CONFIG, name="tiny-llama", source="test")
FAST = BenchSettings(device="cpu", warmup=1, repeats=2)
pytestmark = pytest.mark.usefixtures("one_thread")


def finetune(**fields: Any) -> FinetuneJob:
    spec = {"kind": "finetune", "model": "tiny-llama", "method": "full", "precision": "fp32", "micro_batch": 2,
            "seq_len": 32} | fields
    job = parse_job(spec)
    assert isinstance(job, FinetuneJob)
    return job


def bench_case(job: FinetuneJob) -> Any:
    spec = LlmCaseSpec(name="case", params=bench._case_params(job, FAST), job=job, config=CONFIG, settings=FAST,
                       device="cpu")
    return run_finetune_case(spec)


# --- the bench runs each setting ----------------------------------------------------------------------


@pytest.mark.parametrize(("fields", "note"), [
    ({"gradient_checkpointing": True, "checkpoint_policy": "selective"}, "selective (SAC"),
    ({"activation_offload": True}, "activation offload"),
    ({"activation_offload": True, "gradient_checkpointing": True}, "activation offload"),
    ({"optimizer_in_backward": True}, "optimizer in the backward"),
    ({"sample_tokens": 20, "padding": "longest", "micro_batch": 1}, "rows of 20 tokens"),
    ({"method": "lora", "precision": "bf16_mixed", "optimizer_in_backward": True}, "optimizer in the backward"),
])
def test_the_bench_runs_the_setting(fields: dict[str, Any], note: str) -> None:
    case = bench_case(finetune(**fields))
    assert case.failure is None
    assert any(note in n for n in case.notes)
    step = next(m for m in case.metrics if m.name == "step_s")
    assert step.value > 0


def test_padding_reports_dataset_tokens_not_padded_ones() -> None:
    case = bench_case(finetune(sample_tokens=8))  # padded to seq_len 32: 2 rows × 8 data tokens per step
    metrics = {m.name: m for m in case.metrics}
    assert metrics["tokens_per_s"].value == pytest.approx(16 / metrics["step_s"].value, rel=0.05)


def test_compile_without_a_cxx_compiler_falls_back_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda _name: None)
    case = bench_case(finetune(compile=True))
    assert case.failure is None
    assert any("torch.compile backend: aot_eager" in n and "no C++ compiler" in n for n in case.notes)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None, reason="inductor needs C++")
def test_compile_with_inductor_runs() -> None:
    case = bench_case(finetune(compile=True, micro_batch=1, seq_len=16))
    assert case.failure is None
    assert any("torch.compile backend: inductor" in n for n in case.notes)


@pytest.mark.parametrize(("fields", "says"), [
    ({"optimizer": "paged_adamw_8bit"}, "paged 8-bit AdamW"),
    ({"optimizer": "paged_adamw_32bit"}, "paged 32-bit AdamW"),
    ({"method": "qlora", "precision": "bf16_mixed", "unquantized_modules": ["down_proj"]}, "QLoRA"),
    ({"sharding": "fsdp", "offload_params": True}, "offload_params"),
])
def test_settings_the_cpu_cannot_run_are_unsupported_here(fields: dict[str, Any], says: str) -> None:
    with pytest.raises(UnsupportedHere, match=says):
        bench_case(finetune(**fields))


# --- what the real step does --------------------------------------------------------------------------


def model(seed: int = 0) -> Any:
    return build_causal_lm(CONFIG, attention="sdpa", dtype=torch.float32, device="cpu", seed=seed).train()


def ids(batch: int = 2, tokens: int = 32) -> Any:
    return torch.randint(0, CONFIG["vocab_size"], (batch, tokens), generator=torch.Generator().manual_seed(1))


def params_after_step(*, in_backward: bool = False, policy: str | None = None) -> list[Any]:
    m = model()
    if policy:
        enable_checkpointing(m, policy)
    params = list(m.parameters())
    opt = None if in_backward else build_optimizer("adamw", params, "cpu")
    if in_backward:
        optimizer_in_backward("adamw", params, "cpu")
    batch = ids()
    m(input_ids=batch, labels=batch, use_cache=False).loss.backward()
    if opt is not None:
        opt.step()
        opt.zero_grad(set_to_none=True)
    assert all(p.grad is None for p in params)  # freed by zero_grad, or inside the backward
    return [p.detach().clone() for p in params]


def test_optimizer_in_backward_makes_the_same_update() -> None:
    for plain, fused in zip(params_after_step(), params_after_step(in_backward=True), strict=True):
        torch.testing.assert_close(plain, fused)


def test_selective_checkpointing_makes_the_same_update() -> None:
    for plain, selective in zip(params_after_step(), params_after_step(policy="selective"), strict=True):
        torch.testing.assert_close(plain, selective)


def counted_flops(policy: str | None, tokens: int = 32) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    m = model()
    if policy:
        enable_checkpointing(m, policy)
    batch = ids(tokens=tokens)
    with FlopCounterMode(display=False) as counter:
        m(input_ids=batch, labels=batch, use_cache=False).loss.backward()
    return int(counter.get_total_flops())


def test_recompute_flops_match_the_flops_model() -> None:
    """FlopCounterMode counts every matmul run (on the CPU it sees aten.mm, not SDPA), recompute included:
    selective adds none; full adds one forward of the layers' linears, less each layer's last matmul
    (down_proj), which non-reentrant checkpointing's early stop never re-runs because nothing saved
    needs its output. workload/flops.py counts the whole forward (reentrant checkpointing re-runs it)."""
    plain, selective, full = (counted_flops(p) for p in (None, "selective", "full"))
    assert selective == plain
    ours = training_flops(finetune(gradient_checkpointing=True), SHAPE)
    assert plain == 3 * (ours.linear_fwd + ours.head_fwd)  # exact: the forward and its two grads
    down_proj = sum(2.0 * 64 * g.count * g.params_each for g in SHAPE.linears if g.name == "down_proj")
    assert full - plain == ours.linear_fwd - down_proj
    assert full - plain <= ours.total - ours.useful


def test_padded_rows_cost_flops_in_proportion() -> None:
    short, long = counted_flops(None, tokens=8), counted_flops(None, tokens=32)
    ours = [training_flops(finetune(micro_batch=2, seq_len=32, sample_tokens=8, padding=padding), SHAPE).total
            for padding in ("longest", "max_length")]
    # micro_batch 2 with "longest" is counted at seq_len (the longest is unknown): as dear as max_length.
    assert ours[0] == ours[1] == training_flops(finetune(), SHAPE).total
    one = training_flops(finetune(micro_batch=1, sample_tokens=8, padding="longest"), SHAPE).total
    full_row = training_flops(finetune(micro_batch=1), SHAPE).total
    assert one / full_row == pytest.approx(short / long, rel=0.05)


def test_offload_hooks_move_what_the_host_estimate_holds_and_change_nothing() -> None:
    plain_model, offload_model = model(), model()
    batch = ids()
    plain_model(input_ids=batch, labels=batch, use_cache=False).loss.backward()
    ledger = OffloadLedger()
    with offload_activations(torch, offload_model, fake=False, ledger=ledger):
        offload_model(input_ids=batch, labels=batch, use_cache=False).loss.backward()
    for a, b in zip(plain_model.parameters(), offload_model.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad)
    job = finetune(activation_offload=True)
    host = {t.name: t.bytes for t in estimate_host(job, SHAPE).ram}["offloaded activations (pinned)"]
    assert 0 < ledger.moved_bytes <= host
