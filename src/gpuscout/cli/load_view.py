"""`gpuscout load`: build the workload, run one level (or a sweep, or an SLO search), write, render.

The result (kind "load") is written atomically with `-o FILE`; the workload is saved next to it as
FILE.workload.json and its sha256 recorded, so the run can be repeated exactly. Pricing (an offer or
--usd-per-hour) is computed here from the measured cases, not stored: prices are an opinion that
changes (docs/design.md §3). A progress bar goes to stderr when it is a terminal.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from gpuscout.errors import SpecError
from gpuscout.results.schema import BenchResult, Case, Metric

FORMULAS = ("ttft = first content chunk − send; e2e = last content chunk − send; "
            "tpot = (e2e − ttft)/(output tokens − 1); chunk gap = every gap between content chunks; "
            "*from intended = from the scheduled send time (coordinated omission)")


def run_load_command(url: str, *, model: str, endpoint: str, stream: bool, concurrency: int | None,
                     rate: float | None, arrival: str, burstiness: float, requests: int | None,
                     duration: str | None, warmup: int, prompt_tokens: int, prompt_dist: str, prompt_spread: int,
                     output_tokens: int, dataset: Path | None, tokenizer: str | None, seed: int,
                     api_key_env: str | None, timeout_s: float, sweep: str | None, search: bool,
                     ttft_p95: float | None, tpot_p95: float | None, e2e_p95: float | None, percentile: float,
                     offers: Path | None, offer: str | None, usd_per_hour: float | None,
                     output: Path | None) -> tuple[dict[str, Any], RenderableType]:
    from gpuscout.loadgen.client import endpoint_url
    from gpuscout.workload.job import Slo

    if endpoint not in ("chat", "completions"):
        raise SpecError(f"--endpoint {endpoint!r} is not chat or completions.",
                        "gpuscout load speaks /v1/chat/completions and /v1/completions.",
                        "Pass --endpoint chat or --endpoint completions.")
    endpoint_url(url, "chat")  # a malformed URL is a user error before any work
    slo = Slo(ttft_p95_s=ttft_p95, tpot_p95_s=tpot_p95, e2e_p95_s=e2e_p95) if (ttft_p95 or tpot_p95 or e2e_p95) \
        else None
    duration_s = _duration(duration)
    make_shape = _shape_factory(concurrency=concurrency, rate=rate, arrival=arrival, burstiness=burstiness,
                                requests=requests if requests or duration_s else 100, duration_s=duration_s,
                                warmup=warmup, seed=seed)
    n_prompts = (requests or 256) + warmup
    workload = _workload(n_prompts, dataset=dataset, prompt_tokens=prompt_tokens, prompt_dist=prompt_dist,
                         prompt_spread=prompt_spread, output_tokens=output_tokens, tokenizer=tokenizer, seed=seed)
    workload_hash = _save_workload(workload, output)
    level = concurrency if rate is None else rate
    cases, shapes, search_payload = _measure(url, model, workload, make_shape, level, endpoint=endpoint, stream=stream,
                                             api_key_env=api_key_env, timeout_s=timeout_s, slo=slo,
                                             percentile=percentile, sweep=sweep, search=search)
    from gpuscout.loadgen.run import build_result

    result = build_result(url=_clean_url(url, endpoint), model=model, workload=workload, workload_hash=workload_hash,
                          cases=cases, shapes=shapes, endpoint=endpoint,  # type: ignore[arg-type]
                          stream=stream)
    if output is not None:
        from gpuscout.results.store import save_result

        save_result(result, output)
    costs = _costs(result, offers=offers, offer=offer, usd_per_hour=usd_per_hour)
    payload: dict[str, Any] = result.model_dump(mode="json")
    if costs:
        payload["costs"] = costs
    if search_payload is not None:
        payload["search"] = search_payload
    _warn(result)
    return payload, render_load(result, output=output, costs=costs, search=search_payload)


def _measure(url: str, model: str, workload: Any, make_shape: Any, level: float | None, *, endpoint: str,
             stream: bool, api_key_env: str | None, timeout_s: float, slo: Any, percentile: float, sweep: str | None,
             search: bool) -> tuple[list[Case], list[Any], dict[str, Any] | None]:
    from gpuscout.loadgen.run import measure_case

    shapes: list[Any] = []

    def run_one(shape: Any) -> Case:
        shapes.append(shape)
        with _progress(shape) as progress:
            return measure_case(url, model, workload, shape, endpoint=endpoint,  # type: ignore[arg-type]
                                stream=stream,
                                api_key_env=api_key_env, timeout_s=timeout_s, slo=slo, percentile=percentile,
                                progress=progress)[1]

    if sweep:
        search_mod = _search_module()
        levels = _levels(sweep, integer=make_shape.closed)
        return search_mod.sweep(levels, make_shape, run_one), shapes, None
    if search:
        search_mod = _search_module()
        if slo is None:
            raise SpecError("--search has no target.", "It finds the most load whose P95 latencies meet targets.",
                            "Add at least one of --ttft-p95, --tpot-p95, --e2e-p95 (seconds).")
        hi = level if level is not None else 64
        lo: float = 1 if make_shape.closed else hi / 16
        found = search_mod.search_max_load(run_one, make_shape, slo=slo, lo=lo, hi=hi, steps=6,
                                           latency_from="intended")
        info = {"best_level": found.best_level, "goodput_rps": found.goodput_rps, "outcome": found.outcome,
                "message": found.message}
        return list(found.cases), shapes, info
    return [run_one(make_shape(level if level is not None else 1))], shapes, None


class _ShapeFactory:
    def __init__(self, closed: bool, **fields: Any) -> None:
        self.closed = closed
        self.fields = fields

    def __call__(self, level: float) -> Any:
        from gpuscout.loadgen.schedule import LoadShape

        key = {"concurrency": int(level)} if self.closed else {"rate_rps": float(level)}
        try:
            return LoadShape(**self.fields, **key)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise SpecError(f"Invalid load shape: {first['msg']}.",
                            "Concurrency, rate, requests and duration must be positive; warm-up ≥ 0.",
                            "Correct the option.") from None


def _shape_factory(*, concurrency: int | None, rate: float | None, arrival: str, burstiness: float,
                   requests: int | None, duration_s: float | None, warmup: int, seed: int) -> _ShapeFactory:
    if concurrency is not None and rate is not None:
        raise SpecError("Both --concurrency and --rate were given.",
                        "A run is either closed loop (fixed in-flight) or open loop (arrival rate).",
                        "Pass one of them.")
    if rate is not None and arrival not in ("constant", "poisson", "gamma"):
        raise SpecError(f"--arrival {arrival!r} is unknown.", "Open-loop arrivals are constant, poisson or gamma.",
                        "Pass --arrival constant, poisson or gamma.")
    closed = rate is None
    return _ShapeFactory(closed, kind="concurrency" if closed else arrival, burstiness=burstiness, requests=requests,
                         duration_s=duration_s, warmup_requests=warmup, seed=seed)


def _levels(text: str, *, integer: bool) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise SpecError(f"--sweep {text!r} is not a list of numbers.", "A sweep runs one case per level.",
                        "Pass levels like --sweep 1,2,4,8.") from None
    return [int(v) if integer else v for v in values]


def _search_module() -> Any:
    try:
        from gpuscout.loadgen import search
    except ImportError:
        raise SpecError("Sweeps and SLO search are not available in this build.",
                        "gpuscout.loadgen.search is missing.", "Run single levels, or update gpuscout.") from None
    return search


def _duration(text: str | None) -> float | None:
    if text is None:
        return None
    from gpuscout.units import parse_duration_s

    return parse_duration_s(text)


def _workload(n: int, *, dataset: Path | None, prompt_tokens: int, prompt_dist: str, prompt_spread: int,
              output_tokens: int, tokenizer: str | None, seed: int) -> Any:
    from gpuscout.loadgen.workload import dataset_workload, synthetic_workload

    if dataset is not None:
        return dataset_workload(dataset, n=None, output_tokens=output_tokens, tokenizer_path=tokenizer, seed=seed)
    if prompt_dist not in ("fixed", "uniform", "normal"):
        raise SpecError(f"--prompt-dist {prompt_dist!r} is unknown.", "Prompt lengths are fixed, uniform or normal.",
                        "Pass --prompt-dist fixed, uniform or normal.")
    return synthetic_workload(n, prompt_tokens=prompt_tokens, output_tokens=output_tokens,
                              distribution=prompt_dist,  # type: ignore[arg-type]
                              spread=prompt_spread, tokenizer_path=tokenizer, seed=seed)


def _save_workload(workload: Any, output: Path | None) -> str | None:
    if output is None:
        return None
    from gpuscout.loadgen.run import file_sha256
    from gpuscout.loadgen.workload import save_workload

    path = workload_path(output)
    save_workload(workload, path)
    return file_sha256(path)


def workload_path(output: Path) -> Path:
    return output.with_name(output.stem + ".workload.json")


def _clean_url(url: str, endpoint: str) -> str:
    from gpuscout.loadgen.client import endpoint_url

    return endpoint_url(url, endpoint)  # type: ignore[arg-type]


def _costs(result: BenchResult, *, offers: Path | None, offer: str | None,
           usd_per_hour: float | None) -> list[dict[str, Any]]:
    if usd_per_hour is None and offer is None:
        return []
    try:
        from gpuscout.cost import load_cost
    except ImportError:
        Console(stderr=True).print("[yellow]warning:[/] pricing is not available in this build; skipped.")
        return []
    if offer is not None:
        from gpuscout.hardware.price_sheet import load_price_sheet

        if offers is None:
            raise SpecError("--offer needs --offers.", "The offer id is looked up in a price sheet.",
                            "Pass --offers PRICES.toml --offer ID, or --usd-per-hour P.")
        sheet = load_price_sheet(offers)
        match = [o for o in sheet.offers if o.id == offer]
        if not match:
            raise SpecError(f"No offer {offer!r} in {offers}.", f"It has: {', '.join(o.id for o in sheet.offers)}.",
                            "Pass one of those ids.")
        return [{"case": c.name, **load_cost.price_load_on_offer(c, match[0], sheet.exchange_rates).model_dump()}
                for c in result.cases]
    assert usd_per_hour is not None
    return [{"case": c.name, **load_cost.price_load(c, usd_per_hour).model_dump()} for c in result.cases]


class _progress:
    """A rich progress bar on stderr while one level runs (only when stderr is a terminal)."""

    def __init__(self, shape: Any) -> None:
        self.shape = shape
        self.bar: Any = None

    def __enter__(self) -> Any:
        if not sys.stderr.isatty():
            return None
        from rich.progress import Progress

        self.bar = Progress(console=Console(stderr=True), transient=True)
        self.bar.start()
        task = self.bar.add_task(f"load {self.shape.kind}", total=self.shape.requests)

        def update(done: int, total: int) -> None:
            self.bar.update(task, completed=done, total=total or None)

        return update

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


def _warn(result: BenchResult) -> None:
    err = Console(stderr=True)
    for case in result.cases:
        for note in case.notes:
            if note.startswith("invalid:") or note.startswith("every request failed"):
                err.print(f"[yellow]warning:[/] {case.name}: {note}", highlight=False)


def render_load(result: BenchResult, *, output: Path | None, costs: list[dict[str, Any]],
                search: dict[str, Any] | None) -> RenderableType:
    table = Table(title=f"gpuscout load — {result.fixed.model} ({result.fixed.settings.get('endpoint')}, "
                        f"{'stream' if result.fixed.settings.get('stream') else 'no stream'})")
    for col in ("case", "ok/sent", "req/s", "out tok/s", "TTFT P50", "TTFT P95", "TPOT P50", "TPOT P95", "e2e P95",
                "TTFT P95 (intended)", "lag P95", "errors", "valid"):
        table.add_column(col, justify="left" if col == "case" else "right")
    for case in result.cases:
        m = {x.name: x for x in case.metrics}
        sent = int(case.params.get("requests") or 0) or len(m["send_lag_s"].samples if "send_lag_s" in m else ())
        ok = m["ttft_s"].summary.n if "ttft_s" in m and m["ttft_s"].summary else 0
        valid = "yes" if "valid" in case.notes else "[red]no[/]"
        table.add_row(case.name, f"{ok}/{sent}", _num(m.get("requests_per_s")), _num(m.get("output_tokens_per_s")),
                      _ms(m.get("ttft_s"), "p50"), _ms(m.get("ttft_s"), "p95"), _ms(m.get("tpot_s"), "p50"),
                      _ms(m.get("tpot_s"), "p95"), _ms(m.get("e2e_s"), "p95"),
                      _ms(m.get("ttft_from_intended_s"), "p95"), _ms(m.get("send_lag_s"), "p95"),
                      f"{m['error_rate'].value:.1%}", valid)
    parts: list[RenderableType] = [table, Text(FORMULAS, style="dim")]
    for case in result.cases:
        for note in case.notes:
            if note != "valid":
                parts.append(Text(f"{case.name}: {note}", style="yellow" if "invalid" in note else ""))
    if search is not None:
        parts.append(Text(f"SLO search: {search['message']}"))
    if costs:
        parts.append(_cost_table(costs))
    if output is not None:
        parts.append(Text(f"Result written to {output} (workload: {workload_path(output)})"))
    return Group(*parts)


def _cost_table(costs: list[dict[str, Any]]) -> Table:
    table = Table(title=f"Cost at {costs[0]['usd_per_hour']:g} USD/h ({costs[0]['price_source']})")
    for col in ("case", "$ / 1M output tokens", "$ / request", "$ / 1M goodput tokens"):
        table.add_column(col, justify="left" if col == "case" else "right")
    for c in costs:
        values = (c["usd_per_1m_output_tokens"], c["usd_per_request"], c["usd_per_1m_goodput_tokens"])
        table.add_row(c["case"], *(f"{v:.4g}" if v is not None else "—" for v in values))
    return table


def _num(metric: Metric | None) -> str:
    return "—" if metric is None else f"{metric.value:.3g}"


def _ms(metric: Metric | None, field: str) -> str:
    if metric is None or metric.summary is None:
        return "—"
    return f"{getattr(metric.summary, field) * 1e3:.1f} ms"
