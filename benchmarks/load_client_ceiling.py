"""How much load can `gpuscout load`'s client generate on this machine, and how much latency does it add?

Drives ``benchmarks/zero_latency_server.py`` (a separate process on 127.0.0.1 that answers every request
in microseconds with pre-built SSE bytes) with gpuscout's client, and then the same server with an
established client, GuideLLM, when it is installed (``--guidellm PATH_TO_guidellm``; it lives in its own
venv so the project env stays clean). Per client:

* sustained rate: constant-rate runs stepping the rate up; the highest rate whose send lag P95
  (actual send − scheduled send) stays within ``--max-lag-ms`` with no errors. Higher rates are only
  tried while the previous one was sustained.
* sustained concurrency: closed-loop runs doubling the concurrency; the highest level with no errors
  and TTFT P95 within ``--conc-ttft-budget-ms`` (with a zero-latency server every millisecond of TTFT
  is queueing inside the client).
* added latency: TTFT measured by the client at a light constant rate minus the server's own time
  (measured inside the server, microseconds); P50 / P95.

Everything is bounded (request counts, not open-ended loops) and talks only to 127.0.0.1.

Run: ``.venv/bin/python benchmarks/load_client_ceiling.py [--guidellm /tmp/guidellm-venv/bin/guidellm]``
(``--quick`` for a shorter ladder).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PROMPT_TOKENS = 16
OUTPUT_TOKENS = 16


# --------------------------------------------------------------------------------------- helpers
def pct(xs: list[float], q: float) -> float:
    if not xs:
        return math.nan
    s = sorted(xs)
    k = (len(s) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


@contextlib.contextmanager
def zero_server() -> Iterator[tuple[str, Path]]:
    """Start the zero-latency server; yield (base URL, path of its stats file written on exit)."""
    stats = Path(tempfile.mkstemp(prefix="zls-", suffix=".json")[1])
    proc = subprocess.Popen(
        [
            sys.executable,
            str(HERE / "zero_latency_server.py"),
            "--port",
            "0",
            "--max-seconds",
            "1800",
            "--stats-file",
            str(stats),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("PORT "):
            raise RuntimeError(f"zero-latency server did not start: {line!r}")
        yield f"http://127.0.0.1:{int(line.split()[1])}", stats
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def server_time_us(stats: Path) -> tuple[float, float]:
    with contextlib.suppress(Exception):
        d = json.loads(stats.read_text())
        return float(d["server_time_us_p50"]), float(d["server_time_us_p95"])
    return math.nan, math.nan


@dataclass
class Level:
    rate: float | None  # constant rate (rps) or None for closed loop
    concurrency: int | None
    n: int
    ok: int
    errors: int
    lag_p95_ms: float
    ttft_p50_ms: float
    ttft_p95_ms: float
    achieved_rps: float
    cpu_s: float = math.nan

    def line(self) -> str:
        what = f"rate {self.rate:>7.0f} rps" if self.rate is not None else f"conc {self.concurrency:>6d}    "
        return (
            f"  {what}  n={self.n:<5d} err={self.errors:<4d} lag95={self.lag_p95_ms:8.2f} ms  "
            f"ttft50={self.ttft_p50_ms:8.2f} ms  ttft95={self.ttft_p95_ms:8.2f} ms  "
            f"achieved={self.achieved_rps:8.1f} rps"
        )


@dataclass
class ClientResult:
    name: str
    rate_levels: list[Level] = field(default_factory=list)
    conc_levels: list[Level] = field(default_factory=list)
    light: Level | None = None
    note: str = ""


# --------------------------------------------------------------------------------------- gpuscout
class GpuscoutDriver:
    name = "gpuscout"

    def __init__(self, max_lag_ms: float, conc_budget_ms: float) -> None:
        self.max_lag_ms = max_lag_ms
        self.conc_budget_ms = conc_budget_ms
        from gpuscout.loadgen import client, schedule

        self._client = client
        self._schedule = schedule
        self._workloads: dict[int, object] = {}

    def _workload(self, n: int) -> object:
        if n not in self._workloads:
            from gpuscout.loadgen import workload as wl

            self._workloads[n] = wl.synthetic_workload(n, prompt_tokens=PROMPT_TOKENS, output_tokens=OUTPUT_TOKENS)
        return self._workloads[n]

    def ladder(self, url: str, *, rates: list[float] | None, concs: list[int] | None, seconds: float) -> list[Level]:
        """Step up; stop after the first level that is not sustained."""
        levels = []
        for x in rates or concs or []:
            if rates:
                lv = self.run(url, rate=x, concurrency=None, n=int(min(8000, max(100, x * seconds))))
                ok = lv.errors == 0 and lv.lag_p95_ms <= self.max_lag_ms
            else:
                lv = self.run(url, rate=None, concurrency=int(x), n=int(min(8000, max(4 * x, 500))))
                ok = lv.errors == 0 and lv.ttft_p95_ms <= self.conc_budget_ms
            print(lv.line(), flush=True)
            levels.append(lv)
            if not ok:
                break
        return levels

    def run(self, url: str, *, rate: float | None, concurrency: int | None, n: int) -> Level:
        if rate is not None:
            shape = self._schedule.LoadShape(kind="constant", rate_rps=rate, requests=n, warmup_requests=20)
        else:
            shape = self._schedule.LoadShape(
                kind="concurrency",
                concurrency=concurrency,
                requests=n,
                warmup_requests=min(n, max(20, concurrency or 1)),
            )
        run = self._client.run_load_sync(url, "tiny", self._workload(n), shape, api_key_env=None, timeout_s=60)
        recs = [r for r in run.records if not r.warmup]
        ok = [r for r in recs if r.error is None and r.first_chunk_s is not None]
        lag = [(r.sent_s - r.intended_s) * 1e3 for r in recs if r.intended_s is not None] if rate else []
        ttft = [(r.first_chunk_s - r.sent_s) * 1e3 for r in ok]
        ends = [r.end_s for r in ok if r.end_s is not None]
        starts = [r.sent_s for r in recs]
        span = (max(ends) - min(starts)) if ends and starts else math.nan
        return Level(
            rate,
            concurrency,
            len(recs),
            len(ok),
            len(recs) - len(ok),
            pct(lag, 95) if lag else 0.0,
            pct(ttft, 50),
            pct(ttft, 95),
            len(ok) / span if span and span > 0 else math.nan,
            getattr(run, "client_cpu_s", math.nan),
        )


# --------------------------------------------------------------------------------------- GuideLLM
class GuidellmDriver:
    """GuideLLM (>= 0.8 CLI: `guidellm run --backend kind=… --profile kind=…`), one process per ladder.

    Its start-up (torch, transformers) takes many seconds, so every level of a ladder runs inside one
    invocation (`--override profile.rate …`), each bounded by `max_duration`, then the per-request
    timings are read back from its JSON report.
    """

    name = "GuideLLM"

    def __init__(self, exe: str, processor: str) -> None:
        self.exe = exe
        self.processor = processor

    def ladder(self, url: str, *, rates: list[float] | None, concs: list[int] | None, seconds: float) -> list[Level]:
        with tempfile.TemporaryDirectory(prefix="guidellm-") as tmp:
            out = Path(tmp) / "out.json"
            if rates is not None:
                profile, key, values = "kind=constant,rate=1", "profile.rate", ",".join(f"{r:g}" for r in rates)
            else:
                assert concs is not None
                profile, key, values = "kind=concurrent,streams=1", "profile.streams", ",".join(map(str, concs))
            cmd = [
                self.exe, "run",
                "--backend", f"kind=openai_http,target={url},model={self.processor}",
                "--profile", profile, "--override", key, values,
                "--constraint", f"kind=max_duration,seconds={seconds:g}",
                "--data", f"kind=synthetic_text,prompt_tokens={PROMPT_TOKENS},output_tokens={OUTPUT_TOKENS}",
                "--output", f"kind=json,path={out}",
                "--disable-console",
            ]  # fmt: skip
            env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, cwd=tmp)
            if p.returncode != 0 or not out.exists():
                raise RuntimeError(f"guidellm failed rc={p.returncode}: {(p.stderr or p.stdout)[-2000:]}")
            report = json.loads(out.read_text())
        levels = []
        for i, bench in enumerate(report["benchmarks"]):
            levels.append(guidellm_level(bench, rates[i] if rates else None, concs[i] if concs else None))
        return levels


def guidellm_level(bench: dict[str, Any], rate: float | None, concurrency: int | None) -> Level:
    """One level from a GuideLLM (0.8) benchmark entry: lag = request_start − targeted_start."""
    reqs = bench["requests"]
    done = list(reqs.get("successful") or [])
    failed = list(reqs.get("errored") or [])
    lag: list[float] = []
    ttft: list[float] = []
    ends: list[float] = []
    starts: list[float] = []
    for r in done:
        t = (r.get("info") or {}).get("timings") or {}
        start, first, end = t.get("request_start"), t.get("first_token_iteration"), t.get("request_end")
        if t.get("targeted_start") is not None and start is not None:
            lag.append((start - t["targeted_start"]) * 1e3)
        if first is not None and start is not None:
            ttft.append((first - start) * 1e3)
        if end is not None:
            ends.append(end)
        if start is not None:
            starts.append(start)
    span = (max(ends) - min(starts)) if ends and starts else math.nan
    return Level(
        rate,
        concurrency,
        len(done) + len(failed),
        len(done),
        len(failed),
        pct(lag, 95) if (lag and rate) else 0.0,
        pct(ttft, 50),
        pct(ttft, 95),
        len(done) / span if span and span > 0 else math.nan,
    )


def make_tiny_processor(path: Path) -> Path:
    """A local word-level tokenizer directory (tokenizer.json + config), built offline with `tokenizers`."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    path.mkdir(parents=True, exist_ok=True)
    words = [f"w{i}" for i in range(1000)]
    vocab = {"[UNK]": 0, "<s>": 1, "</s>": 2, **{w: i + 3 for i, w in enumerate(words)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "unk_token": "[UNK]",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "model_max_length": 4096,
            }
        )
    )
    (path / "special_tokens_map.json").write_text(
        json.dumps({"unk_token": "[UNK]", "bos_token": "<s>", "eos_token": "</s>"})
    )
    (path / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": len(vocab)}))
    return path


# --------------------------------------------------------------------------------------- ladders
def measure(
    driver: GpuscoutDriver | GuidellmDriver, url: str, *, rates: list[float], concs: list[int], seconds: float
) -> ClientResult:
    res = ClientResult(driver.name)
    print(f"[{driver.name}] constant-rate ladder (the first, light level gives the added latency)", flush=True)
    res.rate_levels = driver.ladder(url, rates=rates, concs=None, seconds=seconds)
    res.light = res.rate_levels[0] if res.rate_levels else None
    print(f"[{driver.name}] concurrency ladder", flush=True)
    res.conc_levels = driver.ladder(url, rates=None, concs=concs, seconds=seconds)
    if isinstance(driver, GuidellmDriver):
        for lv in res.rate_levels + res.conc_levels:
            print(lv.line(), flush=True)
    return res


def sustained_rate(res: ClientResult, max_lag_ms: float) -> float:
    """The last rate of the unbroken run of sustained levels from the bottom of the ladder."""
    best = 0.0
    for lv in res.rate_levels:
        if not (lv.rate and lv.errors == 0 and lv.lag_p95_ms <= max_lag_ms):
            break
        best = lv.rate
    return best


def delivered_rate(res: ClientResult) -> float:
    """Looser: the last rate of the unbroken run of levels that delivered >= 95 % of the offered rate."""
    best = 0.0
    for lv in res.rate_levels:
        if not (lv.rate and lv.errors == 0 and lv.achieved_rps >= 0.95 * lv.rate):
            break
        best = lv.rate
    return best


def sustained_conc(res: ClientResult, budget_ms: float) -> int:
    best = 0
    for lv in res.conc_levels:
        if not (lv.concurrency and lv.errors == 0 and lv.ttft_p95_ms <= budget_ms):
            break
        best = lv.concurrency
    return best


def default_max_lag_ms() -> float:
    """The validity gate's send-lag threshold of `gpuscout load`, if the module exposes one."""
    with contextlib.suppress(Exception):
        from gpuscout.loadgen import metrics

        for name in ("DEFAULT_MAX_LAG_S", "MAX_LAG_S", "DEFAULT_MAX_SEND_LAG_S"):
            if hasattr(metrics, name):
                return float(getattr(metrics, name)) * 1e3
    return 10.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="client ceiling of gpuscout load vs GuideLLM")
    ap.add_argument(
        "--guidellm",
        default=shutil.which("guidellm") or "/tmp/guidellm-venv/bin/guidellm",
        help="path of the guidellm executable (skipped when absent)",
    )
    ap.add_argument("--max-lag-ms", type=float, default=None, help="send-lag P95 threshold (default: gpuscout's)")
    ap.add_argument("--conc-ttft-budget-ms", type=float, default=50.0)
    ap.add_argument("--quick", action="store_true", help="shorter ladders")
    ap.add_argument("--only", choices=["gpuscout", "guidellm"], default=None)
    args = ap.parse_args(argv)
    max_lag_ms = args.max_lag_ms if args.max_lag_ms is not None else default_max_lag_ms()
    rates: list[float] = [50, 100, 200, 400, 600, 800, 1200, 1600, 2400, 3200]
    concs = [1, 4, 16, 64, 128, 256, 512, 1024]
    secs = 2.0 if args.quick else 4.0
    if args.quick:
        rates, concs = [50, 200, 400, 800, 1600], [1, 16, 64, 256]

    results: list[tuple[ClientResult, tuple[float, float]]] = []
    drivers: list[GpuscoutDriver | GuidellmDriver] = []
    if args.only in (None, "gpuscout"):
        drivers.append(GpuscoutDriver(max_lag_ms, args.conc_ttft_budget_ms))
    if args.only in (None, "guidellm"):
        if Path(args.guidellm).exists():
            proc_dir = make_tiny_processor(Path(tempfile.mkdtemp(prefix="tinytok-")))
            drivers.append(GuidellmDriver(args.guidellm, str(proc_dir)))
        else:
            print(f"GuideLLM not found at {args.guidellm}: skipped", flush=True)
    for d in drivers:
        # a fresh server per client, so its recorded own-time covers exactly this client's requests
        with zero_server() as (url, stats):
            t0 = time.perf_counter()
            try:
                res = measure(d, url, rates=rates, concs=concs, seconds=secs)
            except Exception as e:  # report what broke and go on with the other client
                res = ClientResult(d.name, note=f"failed: {type(e).__name__}: {str(e)[:300]}")
                print(res.note, flush=True)
            print(f"[{d.name}] {time.perf_counter() - t0:.0f} s", flush=True)
        results.append((res, server_time_us(stats)))
        stats.unlink(missing_ok=True)

    print()
    print(
        f"Client ceiling on {os.cpu_count()} CPU cores, 127.0.0.1, zero-latency server, "
        f"{PROMPT_TOKENS} prompt / {OUTPUT_TOKENS} output tokens, streaming chat"
    )
    hdr = (
        f"{'client':<10} {'sustained rate (rps)':>21} {'delivered rate (rps)':>21} {'sustained concurrency':>22} "
        f"{'added latency P50 (ms)':>23} {'P95 (ms)':>9} {'server own time P50 (us)':>25}"
    )
    print(hdr)
    print("-" * len(hdr))
    for res, (s50, _s95) in results:
        if res.light is None:
            print(f"{res.name:<10} {res.note}")
            continue
        add50 = res.light.ttft_p50_ms - s50 / 1e3
        add95 = res.light.ttft_p95_ms - s50 / 1e3
        print(
            f"{res.name:<10} {sustained_rate(res, max_lag_ms):>21.0f} {delivered_rate(res):>21.0f} "
            f"{sustained_conc(res, args.conc_ttft_budget_ms):>22d} {add50:>23.3f} {add95:>9.3f} {s50:>25.1f}"
        )
    print(
        f"sustained rate: highest constant rate of the ladder {rates} reached with send-lag P95 <= {max_lag_ms:g} ms "
        f"and no errors at every step; delivered rate: same with >= 95 % of the offered rate completed (no lag "
        f"limit); sustained concurrency: same over {concs} with TTFT P95 <= "
        f"{args.conc_ttft_budget_ms:g} ms; added latency: client TTFT at {rates[0]:g} rps minus the server's own "
        f"time; {secs:g} s per level."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
