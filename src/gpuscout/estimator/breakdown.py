"""The result of a memory estimate: named terms, each with the formula it used."""

from __future__ import annotations

from typing import Literal

from gpuscout.frozen import Frozen

# Categories group terms for display and for comparison with a FakeTensor trace.
Category = Literal[
    "weights", "gradients", "optimizer_states", "activations", "kv_cache", "temporaries", "overhead"
]


class MemoryTerm(Frozen):
    name: str
    category: Category
    bytes: int
    formula: str  # the formula with its numbers filled in, and the source it follows


class MemoryBreakdown(Frozen):
    """Peak memory on one GPU of the job, as a sum of terms (plus a phase rule, see `peak_bytes`)."""


    job_kind: Literal["finetune", "inference", "image", "video"]
    gpu_sku: str
    gpus: int  # GPUs the job is spread over; terms are per GPU
    usable_bytes: int
    terms: tuple[MemoryTerm, ...]
    peak_bytes: int
    notes: tuple[str, ...] = ()

    @property
    def headroom_bytes(self) -> int:
        return self.usable_bytes - self.peak_bytes

    @property
    def fits(self) -> bool:
        return self.peak_bytes <= self.usable_bytes


def term(name: str, category: Category, nbytes: float, formula: str) -> MemoryTerm:
    """A term, rounded up to whole bytes (never down: memory is what we must not underestimate)."""
    return MemoryTerm(name=name, category=category, bytes=int(-(-nbytes // 1)), formula=formula)


def total_bytes(terms: tuple[MemoryTerm, ...] | list[MemoryTerm]) -> int:
    return sum(t.bytes for t in terms)


def bytes_by_category(breakdown: MemoryBreakdown) -> dict[str, int]:
    sums: dict[str, int] = {}
    for t in breakdown.terms:
        sums[t.category] = sums.get(t.category, 0) + t.bytes
    return sums
