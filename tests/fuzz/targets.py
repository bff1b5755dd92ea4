"""The parsers under fuzz, each called the way gpuscout's commands call it, and one input's verdict."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

from gpuscout.errors import GpuscoutError

from .corpus import FileCase, lay_out
from .invariants import check_error, check_parsed

HANG_S = 5.0  # one input may take this long; a parser past it is counted as hanging


def _job(path: Path, case: FileCase) -> Any:
    from gpuscout.workload.job import load_job

    return load_job(path)


def _price_sheet(path: Path, case: FileCase) -> Any:
    from gpuscout.hardware.price_sheet import load_price_sheet

    return load_price_sheet(path)


def _vms_csv(path: Path, case: FileCase) -> Any:
    from gpuscout.hardware.skypilot import import_skypilot_catalog

    return import_skypilot_catalog(path, cloud=case.options.get("cloud", "aws"), observed_at=date(2026, 11, 1))


def _config_json(path: Path, case: FileCase) -> Any:
    from gpuscout.workload.hf_config import load_hf_config, shape_from_hf_config

    return shape_from_hf_config(load_hf_config(path), name="fuzz", source=str(path))


def _safetensors(path: Path, case: FileCase) -> Any:
    from gpuscout.workload.checkpoint import read_checkpoint_weights

    return read_checkpoint_weights(path)


def _result_json(path: Path, case: FileCase) -> Any:
    from gpuscout.results.store import load_result

    return load_result(path)


def _dataset_jsonl(path: Path, case: FileCase) -> Any:
    from gpuscout.loadgen.workload import dataset_workload

    return dataset_workload(path, n=None, output_tokens=16, tokenizer_path=None, seed=0)


def _dataset_bench(path: Path, case: FileCase) -> Any:
    from gpuscout.measure.llm_setup import read_texts

    return read_texts(path)


TARGETS: dict[str, Callable[[Path, FileCase], Any]] = {
    "job": _job, "price_sheet": _price_sheet, "vms_csv": _vms_csv, "config_json": _config_json,
    "safetensors": _safetensors, "result_json": _result_json, "dataset_jsonl": _dataset_jsonl,
    "dataset_bench": _dataset_bench,
}


class Hang(Exception):
    """The parser ran past HANG_S."""


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Interrupt the block after `seconds` (SIGALRM; main thread only). A blocking open() is interrupted too."""

    def expire(signum: int, frame: Any) -> None:
        raise Hang(f"no answer within {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass(frozen=True)
class Verdict:
    outcome: str  # parsed, error, crash, hang, nonsense
    detail: str = ""
    seconds: float = 0.0


def judge(case: FileCase, folder: Path, *, hang_s: float = HANG_S) -> Verdict:
    """Lay the case out in `folder`, run its parser under a time limit, and judge what came back."""
    entry = lay_out(case, folder)
    start = time.perf_counter()
    try:
        with time_limit(hang_s):
            parsed = TARGETS[case.parser](entry, case)
    except Hang as exc:
        return Verdict("hang", str(exc), time.perf_counter() - start)
    except GpuscoutError as exc:
        seconds = time.perf_counter() - start
        try:
            check_error(case, exc)
        except (AssertionError, UnicodeError) as bad:
            return Verdict("nonsense", f"bad error: {bad}", seconds)
        return Verdict("hang" if seconds > hang_s else "error", exc.what[:120], seconds)
    except Exception as exc:  # anything else is a crash: the CLI would print a traceback
        return Verdict("crash", f"{type(exc).__name__}: {str(exc)[:160]}", time.perf_counter() - start)
    seconds = time.perf_counter() - start
    try:
        check_parsed(case, parsed)
    except (AssertionError, UnicodeError) as bad:
        return Verdict("nonsense", f"{type(bad).__name__}: {str(bad)[:160]}", seconds)
    return Verdict("hang" if seconds > hang_s else "parsed", "", seconds)
