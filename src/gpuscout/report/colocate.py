"""Co-served models on one GPU (`estimate --gpu X` of a spec with `[[co_served]]`): the split of
the GPU between the engines, and each model's largest concurrency with the others at theirs."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from gpuscout.estimator.colocate import Colocation
from gpuscout.report.layout import number_column, prose_column
from gpuscout.report.numbers import exact, gib_number


def colocation_detail(c: Colocation) -> RenderableType:
    """The per-model limits line, then one row per engine: its concurrency and the share to give it."""
    largest = ", ".join(f"{m.label} {exact(m.largest_concurrency)}" for m in c.models)
    return Group(Text(f"Largest concurrency, each with the others at theirs: {largest}"), split_table(c))


def split_table(c: Colocation) -> Table:
    verb = "Split" if c.fits else "Does not fit; each engine needs"
    table = Table(title=f"{verb}: one vLLM process per model, started one after another")
    prose_column(table, "model")
    for header in ("concur-\nrency", "context\ntokens", "--gpu-memory-\nutilization", "in share\nGiB",
                   "beside\nGiB"):
        number_column(table, header)
    for m in c.models:
        table.add_row(m.label, exact(m.concurrency), exact(m.context_tokens), f"{m.gpu_memory_utilization:.3f}",
                      gib_number(m.inside_bytes), gib_number(m.outside_bytes))
    total = sum(m.gpu_memory_utilization for m in c.models)
    table.caption = (f"Shares sum to {total:.3f}; all engines together may take {c.gpu_memory_utilization} of the "
                     "GPU. In share: weights, activations and KV at the concurrency; beside: CUDA context, NCCL "
                     "and CUDA graphs, which vLLM allocates outside its share.")
    return table
