"""Tests of `gpuscout.workload`; the oracle helpers below build real transformers models on meta."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gpuscout.workload.shape import LinearGroup, ModelShape


def build_meta_model(config: dict[str, Any]) -> Any:
    """The real transformers causal LM for a config dict, with meta tensors (no memory, no weights)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    hf_config = AutoConfig.for_model(**config)
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(hf_config)


def _real_linears(model: Any) -> Iterator[tuple[str, int, int, int, bool, int]]:
    """(name, instances, in, out, bias, params) of every linear in the model except lm_head.

    nn.Linear and GPT-2's Conv1D are one instance each; a fused 3-D expert parameter of
    transformers 5, shaped (num_experts, out, in), is num_experts instances.
    """
    from torch import nn
    from transformers.pytorch_utils import Conv1D

    for name, module in model.named_modules():
        params = sum(p.numel() for p in module.parameters(recurse=False))
        if isinstance(module, Conv1D):
            yield name, 1, module.nx, module.nf, module.bias is not None, params
        elif isinstance(module, nn.Linear) and name != "lm_head":
            yield name, 1, module.in_features, module.out_features, module.bias is not None, params
    for name, param in model.named_parameters():
        if param.dim() == 3:
            experts, n_out, n_in = param.shape
            yield name, experts, n_in, n_out, False, param.numel()


def _group_for(name: str, groups: list[LinearGroup]) -> LinearGroup | None:
    """The most specific group whose name is a dotted suffix of the module or parameter name."""
    hits = [g for g in groups if name.endswith("." + g.name)]
    return max(hits, key=lambda g: len(g.name)) if hits else None


def assert_matches_real_model(shape: ModelShape, config: dict[str, Any]) -> None:
    """params_total and every linear group agree with the transformers model built from config."""
    model = build_meta_model(config)
    assert shape.params_total == sum(p.numel() for p in model.parameters())
    instances = {g.name: 0 for g in shape.linears}
    params = {g.name: 0 for g in shape.linears}
    for name, n, n_in, n_out, bias, numel in _real_linears(model):
        group = _group_for(name, list(shape.linears))
        assert group is not None, f"{name} is in no linear group"
        assert (n_in, n_out, bias) == (group.in_features, group.out_features, group.bias), name
        instances[group.name] += n
        params[group.name] += numel
    for g in shape.linears:
        assert (instances[g.name], params[g.name]) == (g.count, g.count * g.params_each), g.name
