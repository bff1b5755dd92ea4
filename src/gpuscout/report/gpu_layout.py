"""A row's GPU layout in words: '8 GPUs: 1 per replica × 8 replicas', never a bare '1/8×'."""

from __future__ import annotations

from gpuscout.cost.pick_row import PickRow

_SPLIT = {"data": "data-parallel", "tensor": "tensor-parallel", "zero3": "ZeRO-3", "fsdp": "FSDP"}


def layout_words(row: PickRow) -> str:
    """How the job uses the instance's GPUs; '' for a one-GPU instance or a row that was not laid out.

    Training data-parallel: '8 GPUs: 1 per replica × 8 replicas'; sharded: '8 GPUs: one
    ZeRO-3 replica (fits on 4)'; serving: '8 GPUs: 2 per replica (tensor-parallel) × 4 replicas';
    GPUs a layout leaves idle are said too."""
    n, group, replicas = row.gpu_count, row.gpus_per_replica, row.replicas
    if n <= 1 or group is None or replicas is None or row.excluded is not None:
        return ""
    split = _SPLIT.get(row.parallel, "")
    if row.parallel in ("zero3", "fsdp"):
        needed = f" (fits on {row.gpus_needed})" if row.gpus_needed is not None and row.gpus_needed < n else ""
        return f"{n} GPUs: one {split} replica{needed}"
    per = f"{group} per replica" + (f" ({split})" if split and group > 1 else "")
    idle = n - group * replicas
    tail = f", {idle} idle" if idle > 0 else ""
    return f"{n} GPUs: {per} × {replicas} replica{'s' if replicas != 1 else ''}{tail}"
