"""A row's GPU layout in words: '8 GPUs: 1 per replica × 8 replicas', never a bare '1/8×'."""

from __future__ import annotations

from gpuscout.cost.pick_row import PickRow

_SPLIT = {"zero3": "ZeRO-3", "fsdp": "FSDP"}


def layout_words(row: PickRow) -> str:
    """How the job uses the instance's GPUs; '' for a one-GPU instance or a row that was not laid out.

    Training data-parallel: '8 GPUs: 1 per replica × 8 replicas'; sharded: '8 GPUs: one ZeRO-3
    replica (fits on 4)'; serving: '8 GPUs: 2 per replica × 4 replicas' (a replica's GPUs split the
    model tensor-parallel), '8 GPUs: one replica over 8'; GPUs a layout leaves idle are said too."""
    n, group, replicas = row.gpu_count, row.gpus_per_replica, row.replicas
    if n <= 1 or group is None or replicas is None or row.excluded is not None:
        return ""
    if row.parallel in ("zero3", "fsdp"):
        split = _SPLIT[row.parallel]
        needed = f" (fits on {row.gpus_needed})" if row.gpus_needed is not None and row.gpus_needed < n else ""
        return f"{n} GPUs: one {split} replica{needed}"
    idle = n - group * replicas
    tail = f", {idle} idle" if idle > 0 else ""
    if replicas == 1:
        return f"{n} GPUs: one replica over {group}{tail}"
    return f"{n} GPUs: {group} per replica × {replicas} replicas{tail}"
