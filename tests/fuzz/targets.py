"""The parsers under fuzz, each called the way gpuscout's commands call it, and one input's verdict."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from gpuscout.errors import GpuscoutError

from .corpus import FileCase, lay_out
from .invariants import check_error, check_parsed

HANG_S = 5.0  # one input may take this long; a parser past it is counted as hanging
# Surfaces that draw a whole page or estimate every phase take seconds for a valid input on a busy 2-core
# machine (a report of a load sweep: 1.2–2.4 s quiet): their bound is this, whatever is asked for.
SLOWER_S = {"report_doc": 20.0, "compare_pair": 20.0, "coserved_job": 20.0, "video_job": 20.0}


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


def _inputs(path: Path) -> list[Path]:
    """The files of a folder entry in order, or the entry itself when it is not a folder (raw or special)."""
    return sorted((p for p in path.iterdir() if p.is_file()), key=lambda p: p.name) if path.is_dir() else [path]


def _metrics_body(path: Path, case: FileCase) -> Any:
    """Scrapes of /metrics as the load monitor reads them (at most MAX_METRICS_BYTES, decoded leniently),
    through a level's summary into a load result, as `load -o` writes it."""
    from gpuscout.loadgen.metrics import summarize_load
    from gpuscout.loadgen.record import LoadRun, RequestRecord, ServerSample
    from gpuscout.loadgen.run import build_result
    from gpuscout.loadgen.schedule import LoadShape
    from gpuscout.loadgen.server_metrics import MAX_METRICS_BYTES, MetricOutOfRange, parse_prometheus, read_server
    from gpuscout.loadgen.workload import Prompt, Workload
    from gpuscout.results.database import record
    from gpuscout.results.store import save_result

    samples, engine = [], None
    for t, page in enumerate(_inputs(path)):
        if not page.is_file():
            continue  # a page that is not plain bytes stands for no answer: the monitor notes it and goes on
        with page.open("rb") as handle:
            body = handle.read(MAX_METRICS_BYTES + 1)
        if len(body) > MAX_METRICS_BYTES:
            continue  # the monitor notes such a page once and stops asking
        try:
            found, values = read_server(parse_prometheus(body.decode("utf-8", "replace")))
        except MetricOutOfRange:  # as the monitor does: one impossible value, and none of its pages are kept
            samples.clear()
            break
        if not values:
            break  # no name gpuscout reads: the monitor stops asking
        engine = engine or found
        samples.append(ServerSample(t_s=float(t), values=values))
    records = tuple(RequestRecord(index=i, warmup=False, intended_s=0.5 * i, sent_s=0.5 * i,
                                  first_chunk_s=0.5 * i + 0.1, chunk_s=(0.5 * i + 0.1, 0.5 * i + 0.2),
                                  end_s=0.5 * i + 0.2, status=200, error=None, output_tokens_server=2,
                                  prompt_tokens_server=4, output_tokens_client=None) for i in range(3))
    run = LoadRun(records=records, shape=LoadShape(kind="concurrency", concurrency=1, requests=3),
                  started_at=datetime(2026, 11, 1, tzinfo=UTC), wall_s=1.2, client_cpu_s=0.1, url="http://127.0.0.1:1",
                  model="m", endpoint="chat", stream=True, server=tuple(samples), server_engine=engine)
    case_ = summarize_load(run, slo=None)
    workload = Workload(prompts=(Prompt(text="fuzz", prompt_tokens=4, output_tokens=2),), source="synthetic", seed=0,
                        tokenizer=None, description="fuzz")
    result = build_result(url=run.url, model="m", workload=workload, workload_hash=None, cases=[case_],
                          shapes=[run.shape], endpoint="chat", stream=True)
    # What `load -o` and the store then do with it.
    save_result(result, path.parent / "load.json")
    record(path.parent / "results.sqlite", "load", json.loads(result.model_dump_json()))
    return result


def _trace(path: Path, case: FileCase) -> Any:
    from gpuscout.loadgen.trace import trace_workload

    return trace_workload(path, tokenizer_path=None, seed=0)


def _sharegpt(path: Path, case: FileCase) -> Any:
    from gpuscout.loadgen.traffic import sharegpt_workload

    return sharegpt_workload(path, output_tokens=16, tokenizer_path=None, seed=0,
                             multi_turn=bool(case.options.get("multi_turn")))


def _report(path: Path, case: FileCase) -> Any:
    """`gpuscout report FILE`: the documents read, then the page drawn."""
    from gpuscout import api
    from gpuscout.report.html.page import render_report

    inputs = api.report_inputs([path], store=path.parent / "no-store.sqlite")
    return render_report(inputs.documents, version="0.0.0")


def _compare(path: Path, case: FileCase) -> Any:
    """`gpuscout compare A B`: the comparison and verdict, drawn as Markdown and as the terminal table."""
    import io

    from rich.console import Console

    from gpuscout import api
    from gpuscout.report.compare import render_markdown, render_table

    report = api.compare([str(p) for p in _inputs(path)], allow_diff=bool(case.options.get("allow_diff")),
                         store=path.parent / "no-store.sqlite")
    markdown = render_markdown(report.comparison, report.verdict, report.costs, notes=report.warnings)
    screen = io.StringIO()
    Console(file=screen, width=80, force_terminal=False).print(render_table(report.comparison, report.verdict))
    return report, markdown + screen.getvalue()


def _store(path: Path, case: FileCase) -> Any:
    """`gpuscout results list`, then `results show` of every listed run."""
    from gpuscout.results.database import fetch_result, kinds_stored, list_runs

    runs, total = list_runs(path)
    kinds_stored(path)
    return runs, total, [fetch_result(path, run.id) for run in runs]


def _calibrate(path: Path, case: FileCase) -> Any:
    """`gpuscout calibrate RESULTS -o FILE`: observations read, fitted, written as TOML and read back."""
    from gpuscout.estimator.calibration import fit_calibration, load_calibration, save_calibration
    from gpuscout.results.calibration_inputs import read_observations

    observations, _ = read_observations(_inputs(path))
    calibration = fit_calibration(observations)
    out = path.parent / "calibration.toml"
    save_calibration(calibration, out)
    return observations, calibration, load_calibration(out)


def _job_estimate(path: Path, case: FileCase) -> Any:
    """`gpuscout estimate JOB --gpu h100`: the job read, its models resolved, memory and speed estimated."""
    from gpuscout import api

    return api.estimate(str(path), gpus=["h100"], use_calibration=False)


TARGETS: dict[str, Callable[[Path, FileCase], Any]] = {
    "job": _job, "price_sheet": _price_sheet, "vms_csv": _vms_csv, "config_json": _config_json,
    "safetensors": _safetensors, "result_json": _result_json, "dataset_jsonl": _dataset_jsonl,
    "dataset_bench": _dataset_bench, "metrics_body": _metrics_body, "trace_jsonl": _trace,
    "sharegpt_json": _sharegpt, "report_doc": _report, "compare_pair": _compare, "store_file": _store,
    "calibrate_inputs": _calibrate, "coserved_job": _job_estimate, "video_job": _job_estimate,
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
    hang_s = max(hang_s, SLOWER_S.get(case.parser, 0.0))
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
