"""How long the whole job takes, from the time one timed repeat of its work took: one definition.

The bench times repeats of the job's own unit of work; the whole job is that unit, repeated:

    fine-tune   micro-batches per data-parallel rank = dataset_tokens × epochs / (micro_batch × seq_len)
                / (gpus / tensor_parallel), each one repeat (forward, backward, optimizer step); plus
                a checkpoint save every `checkpoint_every_steps` optimizer steps
    inference   generations = requests / concurrency, each one repeat (prefill + every decode step)
    image       batches = ceil(images / batch), each one repeat (text encoders, every step, VAE decode)

    whole-job time = repeats × mean time per repeat + the measured start-up (imports, CUDA init,
                     model build, first step) + checkpoint saves × time per save

`gpuscout bench` reports it as `job_s` and `compare --offers` bills it, so both say the same time
(docs/measurement.md §1.14). It is linear in the repeat time, so the mean of per-repeat job times
is the job time at the mean repeat time, and run means combine the same way.
"""

from __future__ import annotations

import math

from gpuscout.workload.flops import data_tokens_per_row, micro_batches_per_rank
from gpuscout.workload.job import FinetuneJob, ImageJob, InferenceJob, Job, VideoJob


def job_repeats(job: Job, *, concurrency: int | None = None) -> tuple[float, str]:
    """How many timed repeats make the whole job, and what one repeat is (a phrase for formulas)."""
    match job:
        case FinetuneJob():
            ranks = job.gpus // job.tensor_parallel
            per_rank = f" / {ranks} data-parallel ranks" if ranks > 1 else ""
            row = data_tokens_per_row(job)  # seq_len, or one padded sample's real tokens (flops.py)
            return (micro_batches_per_rank(job, ranks),
                    f"dataset_tokens {job.dataset_tokens:,} × epochs {job.epochs:g} / (micro_batch {job.micro_batch} "
                    f"× {row:,.0f} data tokens per row){per_rank} micro-batches")
        case InferenceJob():
            level = concurrency or job.concurrency
            return job.requests / level, f"requests {job.requests:,} / concurrency {level} generations"
        case ImageJob():
            return float(math.ceil(job.images / job.batch)), f"ceil(images {job.images:,} / batch {job.batch}) batches"
        case VideoJob():
            return float(math.ceil(job.clips / job.batch)), f"ceil(clips {job.clips:,} / batch {job.batch}) batches"
    raise AssertionError(job)


def checkpoint_saves(job: Job) -> int:
    """Checkpoints a fine-tune saves on its way (none for other jobs, or when the spec sets no interval)."""
    if not isinstance(job, FinetuneJob) or job.checkpoint_every_steps is None:
        return 0
    steps = math.ceil(micro_batches_per_rank(job, job.gpus // job.tensor_parallel) / job.grad_accum)
    return steps // job.checkpoint_every_steps


def whole_job_s(job: Job, repeat_s: float, *, startup_s: float = 0.0, save_s: float = 0.0,
                concurrency: int | None = None) -> float:
    """repeats × time per repeat + start-up + saves × time per save."""
    repeats, _ = job_repeats(job, concurrency=concurrency)
    return repeats * repeat_s + startup_s + checkpoint_saves(job) * save_s


def whole_job_formula(job: Job, *, startup_s: float, save_s: float | None, concurrency: int | None = None) -> str:
    """The formula `whole_job_s` applies, with the job's numbers, for a metric's note."""
    _, repeats = job_repeats(job, concurrency=concurrency)
    saves = checkpoint_saves(job)
    text = f"{repeats} × seconds per repeat + start-up {startup_s:.1f} s"
    if saves and save_s is not None:
        text += f" + {saves} checkpoint saves × {save_s:.2f} s"
    elif saves:
        text += f" ({saves} checkpoint saves not measured)"
    return text
