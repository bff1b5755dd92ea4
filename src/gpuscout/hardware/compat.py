"""Compatibility rules: what a job's kernels, formats, libraries and layout need of a GPU (`compat.toml`).

Data, not code, like the GPU catalog (docs/design.md §4): each rule names the feature of a job it
concerns, the GPUs it fires on (by compute capability, AMD architecture or missing peer-to-peer),
what happens there (excluded with a fix, a slower fallback that the speed model prices, or a caveat)
and its public sources. This module loads and validates the rules and says whether one fires on a GPU;
judging a job against them is the estimator's (`estimator/compat.py`).
"""

from __future__ import annotations

import functools
import tomllib
from collections.abc import Mapping
from importlib import resources
from types import MappingProxyType
from typing import Any, Literal

from pydantic import Field, model_validator

from gpuscout.frozen import Frozen
from gpuscout.hardware.catalog import Architecture, Gpu

Feature = Literal["flash_attention_2", "bf16", "fp8_weights", "bitsandbytes", "vllm", "collectives"]
Outcome = Literal["excluded", "fallback", "caveat"]
JobKind = Literal["finetune", "inference", "image", "video"]


class Rule(Frozen):
    """One rule: on which GPUs a feature of a job cannot run as written, and what then."""

    id: str = Field(pattern=r"^[a-z0-9]+(-[a-z0-9]+)*$")
    feature: Feature
    nvidia_below_sm: int | None = Field(default=None, gt=0)
    amd_architectures: tuple[Architecture, ...] = ()
    no_peer_to_peer: bool = False
    outcome: Outcome
    reason: str = Field(min_length=1)
    fix_text: str | None = None  # "excluded": the change in words
    fix: dict[JobKind, dict[str, str]] = Field(default_factory=dict)  # "excluded": the spec edits per job kind
    fallback: str | None = None  # "fallback" and "caveat": what runs instead, or the condition
    sources: tuple[str, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _complete(self) -> Rule:
        if self.nvidia_below_sm is None and not self.amd_architectures and not self.no_peer_to_peer:
            raise ValueError(f"rule {self.id!r} fires on no GPU (set nvidia_below_sm, amd_architectures or "
                             "no_peer_to_peer)")
        if self.outcome == "excluded" and (not self.fix or self.fix_text is None):
            raise ValueError(f"rule {self.id!r} excludes a GPU, so it needs a fix and a fix_text")
        if self.outcome != "excluded" and self.fallback is None:
            raise ValueError(f"rule {self.id!r} ({self.outcome}) needs a fallback text")
        return self

    def fires_on(self, gpu: Gpu) -> bool:
        """Whether this rule applies to `gpu` (the job's use of the feature is the caller's test)."""
        if self.no_peer_to_peer and not gpu.peer_to_peer:
            return True
        if gpu.vendor == "nvidia" and self.nvidia_below_sm is not None:
            return gpu.sm is not None and gpu.sm < self.nvidia_below_sm
        return gpu.vendor == "amd" and gpu.architecture in self.amd_architectures

    def words(self, gpu: Gpu, text: str) -> str:
        return text.format(gpu=gpu.name, sm=f"sm{gpu.sm}" if gpu.sm is not None else gpu.architecture)


class CompatRules(Frozen):
    rules: tuple[Rule, ...] = Field(min_length=1)
    host_staged_link_fraction: float = Field(gt=0, le=1)
    sources: dict[str, str]


@functools.cache
def load_rules() -> CompatRules:
    """The bundled rules, validated (a broken bundled file is a bug: ValueError with its traceback)."""
    text = resources.files("gpuscout.hardware").joinpath("compat.toml").read_text(encoding="utf-8")
    return parse_rules(tomllib.loads(text))


def parse_rules(document: Mapping[str, Any]) -> CompatRules:
    """Validate a rules document: each rule, unique ids, and that every cited source exists."""
    sources = dict(document.get("sources", {}))
    staged = document.get("host_staged", {})
    rules = CompatRules(rules=tuple(Rule.model_validate(r) for r in document.get("rule", [])),
                        host_staged_link_fraction=staged.get("link_fraction", 0), sources=sources)
    ids = [r.id for r in rules.rules]
    if len(set(ids)) != len(ids):
        raise ValueError(f"duplicate rule ids in compat.toml: {sorted({i for i in ids if ids.count(i) > 1})}")
    cited = {s for r in rules.rules for s in r.sources} | set(staged.get("sources", []))
    missing = sorted(cited - set(sources))
    if missing:
        raise ValueError(f"compat.toml cites sources missing from [sources]: {missing}")
    return rules


def host_staged_link_fraction() -> float:
    """The share of the P2P link rate that collectives reach when staged through host memory."""
    return load_rules().host_staged_link_fraction


def rule_sources() -> Mapping[str, str]:
    return MappingProxyType(load_rules().sources)
