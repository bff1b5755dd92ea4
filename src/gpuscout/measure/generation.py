"""Timing one diffusion generation, shared by the image slice (`image_bench`) and the video slice
(`video_bench`): the start-up phases, the warm-up and repeats, and each batch split into its phases.

Both slices build a denoiser, a VAE and (when cheap enough) the text encoders with random weights,
then time what the pipeline does for one batch: text encoding once, `steps` denoiser steps, one
VAE decode. What differs (the inputs, the guidance passes, the metrics) stays in the slices.

torch and diffusers are imported inside functions only: importing this module is cheap.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from gpuscout.errors import UnsupportedHere
from gpuscout.measure.harness import BenchSettings
from gpuscout.measure.peak_memory import PeakMemoryMonitor
from gpuscout.measure.startup import StartupClock, startup_seconds
from gpuscout.results.schema import Case, Metric, Scalar

# Text encoders are built and timed when all of them together are at most this size: CLIP ViT-L
# (123 M) and OpenCLIP bigG (695 M) build in seconds. T5-XXL (4.8 B, FLUX.1-dev) and UMT5-XXL
# (5.7 B, Wan) would cost far more build time than their one call per batch is worth measuring;
# their time is left out and noted.
TEXT_ENCODER_PARAMS_LIMIT = 1_500_000_000
STEP_SIZE = 0.05  # Euler-like update; keeps random-weight latents finite over a few steps


class _Component(Protocol):
    @property
    def role(self) -> str: ...

    @property
    def params(self) -> int: ...


def text_encoders_fit(components: Iterable[_Component]) -> bool:
    """Whether the text encoders are cheap enough to build and time (see TEXT_ENCODER_PARAMS_LIMIT)."""
    return sum(c.params for c in components if c.role == "text_encoder") <= TEXT_ENCODER_PARAMS_LIMIT


def random_text_encoder(config: dict[str, Any], dtype: Any, device: str, prompts: int, tokens: int) -> tuple[Any, Any]:
    """A transformers text encoder with random weights, and random token ids for `prompts` prompts."""
    import torch
    import transformers

    model_class = getattr(transformers, config["architectures"][0])
    with torch.device(device):
        model = model_class(model_class.config_class.from_dict(config))
    torch.nn.Module.to(model, dtype)
    model.eval()
    ids = torch.randint(0, config["vocab_size"], (prompts, tokens), device=device)
    return model, ids


def refuse_offload(offload: str, what: str) -> None:
    """Offloaded components are a different job from the one the slice builds: say so, do not time it."""
    if offload != "none":
        raise UnsupportedHere(f"offload = {offload!r} is not benchmarked yet: the {what} slice keeps every "
                              "component on the device, which would be a different job. Measure with "
                              'offload = "none".')


@dataclass
class Timing:
    """One batch's phases: text encoding (None when not measured), each denoiser step, the VAE decode."""

    text_s: float | None
    step_s: list[float]
    vae_s: float

    @property
    def batch_s(self) -> float:
        return (self.text_s or 0.0) + sum(self.step_s) + self.vae_s


class PhaseClock:
    """Phase marks: CUDA events on the current stream on a GPU, perf_counter_ns on the CPU."""

    def __init__(self, device: str) -> None:
        self.cuda = device == "cuda"

    def mark(self) -> Any:
        if not self.cuda:
            return time.perf_counter_ns()
        import torch

        cuda: Any = torch.cuda  # Event is untyped in torch's stubs
        event = cuda.Event(enable_timing=True)
        event.record()
        return event

    def wait(self, mark: Any) -> None:
        if self.cuda:
            mark.synchronize()

    def seconds(self, start: Any, end: Any) -> float:
        return float(start.elapsed_time(end)) / 1000.0 if self.cuda else (end - start) / 1e9


def sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


class Pipe(Protocol):
    """What the shared timing needs of a slice's built pipeline."""

    steps: int
    notes: list[str]


P = TypeVar("P", bound=Pipe)


def generate(pipe: P, clock: PhaseClock, *, encode: Callable[[P], None] | None, step: Callable[[P], None],
             decode: Callable[[P], None]) -> Timing:
    """One batch as the pipeline makes it, each phase between two clock marks."""
    first = clock.mark()
    if encode is not None:
        encode(pipe)
    text_mark = clock.mark() if encode is not None else None
    marks = [text_mark if text_mark is not None else first]
    for _ in range(pipe.steps):
        step(pipe)
        marks.append(clock.mark())
    decode(pipe)
    end = clock.mark()
    clock.wait(end)
    return Timing(text_s=clock.seconds(first, text_mark) if text_mark is not None else None,
                  step_s=[clock.seconds(a, b) for a, b in itertools.pairwise(marks)],
                  vae_s=clock.seconds(marks[-1], end))


@dataclass
class Timed(Generic[P]):
    """What `time_generation` measured: the pipeline, each repeat's phases, start-up and peak memory."""

    pipe: P
    timings: list[Timing]
    clock: StartupClock
    monitor: PeakMemoryMonitor

    @property
    def startup_s(self) -> float:
        return startup_seconds(self.clock.phases())

    def case(self, name: str, params: dict[str, Scalar], metrics: tuple[Metric, ...], wall_start: float) -> Case:
        """The measured case; `wall_start` is the perf_counter reading when the case began."""
        return Case(name=name, params=params, metrics=metrics, peak_memory=self.monitor.result(),
                    startup=self.clock.phases(), wall_s=time.perf_counter() - wall_start, notes=tuple(self.pipe.notes))


def time_generation(settings: BenchSettings, device: str, *, build: Callable[[], P],
                    one_batch: Callable[[P, PhaseClock], Timing], step: Callable[[P], None]) -> Timed[P]:
    """Build the pipeline, time its first step, then warm up and time `settings.repeats` batches."""
    clock = StartupClock(settings.created_at)
    import diffusers  # noqa: F401  (timed: part of the startup a user pays)
    import torch

    clock.mark("imports")
    clock.init_cuda(torch, device)
    torch.manual_seed(settings.seed)
    monitor = PeakMemoryMonitor(device)
    with monitor:
        pipe = build()
        sync(device)
        clock.mark("model_build")
        # Random weights are initialised in fp32 and then cast, a transient that loading a real
        # checkpoint in the job's dtype does not have: count the peak from here (GPU views only;
        # a process's peak RSS cannot be reset).
        monitor.restart()
        pipe.notes.append("torch/NVML peaks count from the end of the model build (random fp32 init, then the cast)"
                          if device == "cuda" else "peak RSS includes building the random weights in fp32")
        with torch.inference_mode():
            started, t0 = time.time(), time.perf_counter()
            step(pipe)
            sync(device)
            clock.first_step(time.perf_counter() - t0, started_at=started)
            for _ in range(settings.warmup):
                one_batch(pipe, PhaseClock(device))
            timings = [one_batch(pipe, PhaseClock(device)) for _ in range(settings.repeats)]
    return Timed(pipe=pipe, timings=timings, clock=clock, monitor=monitor)
