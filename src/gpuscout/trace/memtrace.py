"""Memory tracking of fake-tensor runs: MemTracker with per-category peaks, and reading its results.

Shared by the trace modes (`trace.llm` for transformers training/inference steps, `trace.image` for
diffusers denoiser and VAE passes). A model built on the meta device is made fake with
`materialize_fake` inside `FakeTensorMode`; `category_peak_tracker()` then records every tensor
storage by category (parameter, buffer, gradient, optimizer state, activation, temporary, other)
through `torch.distributed._tools.mem_tracker.MemTracker` (the "FT" approach of
docs/estimator.md §5, torchtitan PR #425).

torch is imported inside functions only: importing this module is cheap.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from gpuscout.errors import GpuscoutError, MissingDependencyError, SpecError
from gpuscout.torchmodel.llm import import_torch_stack

# MemTracker's `_MemRefType` member names → our category names.
_CATEGORY_OF_REFTYPE = {
    "PARAM": "parameters",
    "BUFFER": "buffers",
    "GRAD": "gradients",
    "OPT": "optimizer_states",
    "ACT": "activations",
    "TEMP": "temporaries",
    "OTH": "other",
}
CATEGORIES = tuple(_CATEGORY_OF_REFTYPE.values())
_TOTAL_KEY = "Total"  # MemTracker's key for the per-device sum


def require_positive(**sizes: int) -> None:
    """Refuse a size below 1 with a spec error naming it."""
    for name, value in sizes.items():
        if value < 1:
            raise SpecError(
                f"Cannot trace with {name}={value}.",
                f"{name} must be a positive integer.",
                f"set {name} to 1 or more.",
            )


def import_trace_stack(*names: str) -> Any:
    """Import torch (returned), the named packages and torch's MemTracker; explain what is missing."""
    torch = import_torch_stack(*names, purpose="Trace mode")
    try:
        import torch.distributed._tools.mem_tracker
    except ImportError as exc:
        raise MissingDependencyError(
            "Trace mode needs PyTorch's MemTracker, which this torch build lacks.",
            "MemTracker lives in torch.distributed._tools of recent releases (tested with torch 2.13).",
            "pip install -U 'gpuscout[bench]' torch",
        ) from exc
    return torch


def materialize_fake(model: Any) -> None:
    """Replace every meta parameter and buffer by a fake CPU tensor, keeping tied weights tied.

    Call inside FakeTensorMode. Values are never read, so uninitialized storage is fine. (Under
    FakeTensorMode, `Module.to()` must swap parameters and fails with "Cannot swap t1 because it has
    weakref associated with it", so the tensors are replaced in place instead.)
    """
    import torch

    replacements: dict[int, Any] = {}
    for module in model.modules():
        for store in (module._parameters, module._buffers):
            for name, tensor in store.items():
                if tensor is None:
                    continue
                if id(tensor) not in replacements:
                    fake = torch.empty(tensor.shape, dtype=tensor.dtype, device="cpu")
                    if isinstance(tensor, torch.nn.Parameter):
                        fake = torch.nn.Parameter(fake, requires_grad=tensor.requires_grad)
                    replacements[id(tensor)] = fake
                store[name] = replacements[id(tensor)]


def category_peak_tracker() -> Any:
    """A MemTracker that also remembers each category's own maximum over time.

    `category_peak_bytes` starts from the categories resident on `__enter__`;
    `resident_opt_bytes` is the optimizer state already resident then (see
    `split_optimizer_transients`).
    """
    import torch
    from torch.distributed._tools.mem_tracker import MemTracker

    # torch is untyped (Any) where mypy cannot see it, and untyped-callable where it can.
    class _CategoryPeakTracker(MemTracker):  # type: ignore[misc,no-untyped-call,unused-ignore]
        def __init__(self) -> None:
            super().__init__()
            self.category_peak_bytes: dict[str, int] = dict.fromkeys(CATEGORIES, 0)
            self.resident_opt_bytes = 0
            self.recording = False
            self.frozen_params: list[Any] = []

        def track_external(self, *external: Any) -> None:
            super().track_external(*external)
            for obj in external:
                if isinstance(obj, torch.nn.Module):
                    self.frozen_params.extend(p for p in obj.parameters() if not p.requires_grad)

        def __enter__(self) -> Any:
            # States already exist (warm-up step), so anything the step adds is transient.
            current = by_category(self._curr_mem_snap)
            self.resident_opt_bytes = current["optimizer_states"]
            self.category_peak_bytes = current
            self.recording = True
            # MemTracker (torch 2.13) registers a gradient hook on every parameter it meets, which
            # raises for frozen ones (LoRA's base weights); a placeholder handle makes it skip them.
            for param in self.frozen_params:
                self._param_to_grad_hook_handles[param] = (_NO_HOOK, _NO_HOOK)
            return super().__enter__()

        def _update_peak_stats(self, peak_state: Any) -> None:
            # MemTracker's version also updates per-module peaks, looping over every module seen
            # after every op: with LoRA's ~1000 extra modules an 8B step took 144 s instead of 35 s.
            # We report no per-module peaks, so keep only the global part (same code as torch 2.13).
            for dev, dev_snap in self._curr_mem_snap.items():
                if self._peak_mem.get(dev, 0) < dev_snap[_TOTAL_KEY]:
                    self._peak_mem[dev] = dev_snap[_TOTAL_KEY]
                    self._peak_mem_snap[dev] = dict(dev_snap)

        def _update_snap(self, *args: Any, **kwargs: Any) -> None:
            # Every change to the running totals goes through here, including re-categorizations
            # (e.g. a parameter's gradient moving from Temp to Gradient) that do not trigger
            # MemTracker's own peak update.
            super()._update_snap(*args, **kwargs)
            if not self.recording:  # track_external() before the step is not part of it
                return
            current = split_optimizer_transients(by_category(self._curr_mem_snap), self.resident_opt_bytes)
            for category, value in current.items():
                if value > self.category_peak_bytes[category]:
                    self.category_peak_bytes[category] = value

    return _CategoryPeakTracker()


class _NoHook:
    """Stands in for a hook handle that was never registered."""

    def remove(self) -> None:
        return None


_NO_HOOK = _NoHook()


def by_category(snapshot: dict[Any, dict[Any, int]]) -> dict[str, int]:
    """Sum a per-device MemTracker snapshot into our category names (the Total key is dropped)."""
    totals = dict.fromkeys(CATEGORIES, 0)
    for dev_snap in snapshot.values():
        for reftype, value in dev_snap.items():
            category = _CATEGORY_OF_REFTYPE.get(getattr(reftype, "name", ""))
            if category is not None:
                totals[category] += int(value)
    return totals


def split_optimizer_transients(categories: dict[str, int], resident_opt_bytes: int) -> dict[str, int]:
    """Move what the optimizer step allocates beyond its resident states into temporaries.

    MemTracker labels every tensor created inside `optimizer.step()` as optimizer state, including
    the step's scratch buffers (e.g. upcast copies, update tensors); only the states persist.
    """
    transient = max(categories["optimizer_states"] - resident_opt_bytes, 0)
    return {
        **categories,
        "optimizer_states": categories["optimizer_states"] - transient,
        "temporaries": categories["temporaries"] + transient,
    }


def peak_total(tracker: Any) -> int:
    """Bytes at the single overall peak, over all devices."""
    peak = tracker.get_tracker_snapshot("peak")
    return sum(int(dev_snap.get(_TOTAL_KEY, 0)) for dev_snap in peak.values())


def at_peak_note(tracker: Any) -> str:
    """A note listing each category's bytes at the overall peak."""
    at_peak = split_optimizer_transients(
        by_category(tracker.get_tracker_snapshot("peak")), tracker.resident_opt_bytes
    )
    parts = ", ".join(f"{name} {value}" for name, value in at_peak.items() if value)
    return f"bytes at the overall peak: {parts}"


@contextmanager
def explain_fake_failures(what: str, fix: str) -> Iterator[None]:
    """Turn an op that cannot run on fake CPU tensors into a user error (the cause is chained)."""
    try:
        yield
    except (RuntimeError, NotImplementedError) as exc:
        raise GpuscoutError(what, f"{type(exc).__name__}: {str(exc).strip()[:500]}", fix) from exc
