"""How much of a load client's TTFT is the client itself? Checked against the server's own record.

One asyncio server in its own process (tests/loadgen/fake_openai.py) answers every streamed chat
request with its first token 50 ms after it has the request and a token every 10 ms after (32
tokens), and logs when it received each request and when it wrote each chunk, on CLOCK_MONOTONIC
(one clock for every process of the host). Each client runs closed loops at concurrency 1, 8 and 64
(`--requests` requests each, the levels and clients interleaved, `--repeats` times):

* gpuscout (`gpuscout.loadgen`, one process; and `--workers 2` for the rate table);
* a minimal client: raw asyncio streams, one connection per worker, stamps right before its write;
* GuideLLM and AIPerf, when their executables are given (`--guidellm`, `--aiperf`; install them in
  their own venv, they need a local tokenizer directory, made here with `tokenizers`).

Client overhead = client TTFT − the server's first-byte time (first chunk written − request
received). For gpuscout and the minimal client each request is matched with the server's record by
its prompt (P50 of the per-request differences, and the request leg: server receipt − client send);
the peers' prompts are their own, so their P50 TTFT is held against the P50 of the server's
first-byte times over the same requests. The second table is the sustained rate against a
zero-latency server (benchmarks/zero_latency_server.py) at concurrency 64: requests completed per
second, and the client's CPU µs per request (the steadier figure on a shared machine).

The load average is printed with the tables: on a shared machine the numbers are noisy.

Run: `.venv/bin/python benchmarks/load_overhead.py [--guidellm /tmp/peers-venv/bin/guidellm]
[--aiperf /tmp/peers-venv/bin/aiperf] [--requests 160 --repeats 3] [--out FILE.md]`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "loadgen"))
sys.path.insert(0, str(HERE))

from fake_openai import Served, serve_in_process  # noqa: E402

TTFT_S, TOKEN_S, TOKENS, PROMPT_WORDS = 0.050, 0.010, 32, 16
LEVELS = (1, 8, 64)
CONTENT = re.compile(rb'"content": ?"[^"]')  # a chunk with text (the role-only first one has "")


@dataclass
class Cell:
    overhead_ms: list[float] = field(default_factory=list)  # per repeat: P50 client TTFT − server first byte
    request_leg_ms: list[float] = field(default_factory=list)  # per repeat: P50 server receipt − client send
    rps: list[float] = field(default_factory=list)


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} / {five:.2f} / {fifteen:.2f} (1/5/15 min) on {os.cpu_count()} cores"


def server_ttft_s(s: Served) -> float:
    return s.writes_s[0] - s.received_s


# ------------------------------------------------------------------------------------------ clients
def run_gpuscout(url: str, concurrency: int, n: int, tag: str, workers: int = 1,
                 cpu: list[float] | None = None) -> dict[str, tuple[float, float]]:
    """prompt → (send stamp, first chunk), on perf_counter. `cpu`: gets the client's CPU µs per measured
    request (the event-loop thread's over the measured phase; with workers, every process's CPU)."""
    from gpuscout.loadgen.client import run_load_sync
    from gpuscout.loadgen.schedule import LoadShape
    from gpuscout.loadgen.workers import run_load_workers
    from gpuscout.loadgen.workload import Prompt, Workload

    prompts = tuple(Prompt(text=f"{tag} {i} " + "w " * PROMPT_WORDS, prompt_tokens=PROMPT_WORDS,
                           output_tokens=TOKENS) for i in range(n + concurrency))
    work = Workload(prompts=prompts, source="synthetic", seed=0, tokenizer=None, description=tag)
    shape = LoadShape(kind="concurrency", concurrency=concurrency, requests=n, warmup_requests=concurrency)
    if workers > 1:
        run = run_load_workers(url, "m", work, shape, workers=workers, api_key_env=None)
    else:
        run = run_load_sync(url, "m", work, shape, api_key_env=None)
    assert run.t0_perf_counter_s is not None
    if cpu is not None:
        cpu.append(sum(run.worker_cpu_s if workers > 1 else run.loop_cpu_s) / n * 1e6)
    t0 = run.t0_perf_counter_s
    out = {}
    for r in run.records:
        if not r.warmup and r.chunk_s:
            out[prompts[(concurrency + r.index) % len(prompts)].text] = (t0 + r.sent_s, t0 + r.chunk_s[0])
    return out


async def _raw(host: str, port: int, concurrency: int, n: int, tag: str, warm: int) -> dict[str, tuple[float, float]]:
    """The minimal client: asyncio streams, one keep-alive connection per worker, stamp before the write."""
    todo = iter(range(-warm, n))
    out: dict[str, tuple[float, float]] = {}

    async def worker() -> None:
        reader, writer = await asyncio.open_connection(host, port)
        for i in todo:
            text = f"{tag} {i} " + "w " * PROMPT_WORDS
            body = json.dumps({"model": "m", "messages": [{"role": "user", "content": text}], "max_tokens": TOKENS,
                               "stream": True, "ignore_eos": True}).encode()
            head = (f"POST /v1/chat/completions HTTP/1.1\r\nhost: {host}:{port}\r\ncontent-type: application/json\r\n"
                    f"content-length: {len(body)}\r\n\r\n").encode()
            sent = time.perf_counter()
            writer.write(head + body)
            first = None
            await reader.readuntil(b"\r\n\r\n")
            while True:
                size = int((await reader.readline()).strip(), 16)
                data = await reader.readexactly(size + 2)
                if size == 0:
                    break
                if first is None and CONTENT.search(data):
                    first = time.perf_counter()
            if i >= 0 and first is not None:
                out[text] = (sent, first)
        writer.close()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return out


def run_raw(url: str, concurrency: int, n: int, tag: str,
            cpu: list[float] | None = None) -> dict[str, tuple[float, float]]:
    """As run_gpuscout; `cpu`: this thread's CPU µs per request, warm-up requests and connecting included in
    both the time and the count."""
    host, port = url.removeprefix("http://").split(":")
    before = time.thread_time()
    out = asyncio.run(_raw(host, int(port), concurrency, n, tag, concurrency))
    if cpu is not None:
        cpu.append((time.thread_time() - before) / (n + concurrency) * 1e6)
    return out


def run_guidellm(exe: str, tokenizer: Path, url: str, concurrency: int, n: int) -> list[float]:
    """GuideLLM 0.8 (`guidellm run`): per-request TTFT, s."""
    with tempfile.TemporaryDirectory(prefix="guidellm-") as tmp:
        out = Path(tmp) / "out.json"
        cmd = [exe, "run", "--backend", f"kind=openai_http,target={url},model={tokenizer}",
               "--profile", f"kind=concurrent,streams={concurrency}",
               "--constraint", f"kind=max_requests,count={n}",
               "--data", f"kind=synthetic_text,prompt_tokens={PROMPT_WORDS},output_tokens={TOKENS}",
               "--output", f"kind=json,path={out}", "--disable-console"]
        _run(cmd, tmp)
        report = json.loads(out.read_text())
    ttfts = []
    for r in report["benchmarks"][0]["requests"]["successful"]:
        t = (r.get("info") or {}).get("timings") or {}
        if t.get("first_token_iteration") and t.get("request_start"):
            ttfts.append(t["first_token_iteration"] - t["request_start"])
    return ttfts


def run_aiperf(exe: str, tokenizer: Path, url: str, concurrency: int, n: int) -> list[float]:
    """AIPerf 0.13 (`aiperf profile`): per-request TTFT, s, from its per-record export."""
    with tempfile.TemporaryDirectory(prefix="aiperf-") as tmp:
        cmd = [exe, "profile", "-m", "m", "-u", url, "--endpoint-type", "chat", "--streaming",
               "--concurrency", str(concurrency), "--request-count", str(n), "--isl", str(PROMPT_WORDS),
               "--osl", str(TOKENS), "--tokenizer", str(tokenizer), "--artifact-dir", tmp, "--ui-type", "none",
               "--extra-inputs", "ignore_eos:true", "--no-server-metrics", "--no-gpu-telemetry"]
        _run(cmd, tmp, offline=False)  # its offline mode looks for a hub snapshot even for a local folder
        found = sorted(Path(tmp).rglob("profile_export.jsonl"))
        if not found:
            raise RuntimeError(f"aiperf wrote no profile_export.jsonl under {tmp}")
        ttfts = []
        for line in found[0].read_text().splitlines():
            metrics = (json.loads(line).get("metrics") or {})
            ttft = metrics.get("time_to_first_token") or metrics.get("ttft")
            if isinstance(ttft, dict) and "value" in ttft:
                unit = ttft.get("unit", "ms")
                ttfts.append(float(ttft["value"]) / (1e3 if unit == "ms" else 1e9 if unit == "ns" else 1))
    return ttfts


def _run(cmd: list[str], cwd: str, offline: bool = True) -> None:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1") if offline \
        else dict(os.environ)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800, cwd=cwd)
    if proc.returncode != 0:
        raise RuntimeError(f"{Path(cmd[0]).name} failed ({proc.returncode}): {(proc.stderr or proc.stdout)[-1500:]}")


# ------------------------------------------------------------------------------------------ matching
def matched(client: dict[str, tuple[float, float]], served: list[Served]) -> tuple[float, float]:
    """(P50 overhead, P50 request leg) in ms over the requests both sides recorded."""
    by_prompt = {s.prompt: s for s in served if s.writes_s}
    over, leg = [], []
    for prompt, (sent, first) in client.items():
        s = by_prompt.get(prompt)
        if s is not None:
            over.append((first - sent) - server_ttft_s(s))
            leg.append(s.received_s - sent)
    return statistics.median(over) * 1e3, statistics.median(leg) * 1e3


def unmatched(ttfts: list[float], served: list[Served]) -> float:
    """P50 client TTFT − P50 server first-byte time, ms (the peers' own prompts cannot be matched)."""
    return (statistics.median(ttfts) - statistics.median(server_ttft_s(s) for s in served if s.writes_s)) * 1e3


def make_tokenizer(path: Path) -> Path:
    """A local word-level tokenizer directory (the peers count tokens with one)."""
    from load_client_ceiling import make_tiny_processor

    return make_tiny_processor(path)


# ------------------------------------------------------------------------------------------ runs
def overhead_table(args: argparse.Namespace) -> tuple[dict[tuple[str, int], Cell], list[str]]:
    cells: dict[tuple[str, int], Cell] = {}
    notes: list[str] = []
    tokenizer = make_tokenizer(Path(tempfile.mkdtemp(prefix="tinytok-"))) if args.guidellm or args.aiperf else None
    clients = ["gpuscout", "minimal"] + (["GuideLLM"] if args.guidellm else []) + (["AIPerf"] if args.aiperf else [])
    with serve_in_process(TTFT_S, TOKEN_S) as server:
        for rep in range(args.repeats):
            for level in LEVELS:
                for name in clients:
                    before = len(server.records())
                    tag = f"{name}-{rep}-{level}"
                    start = time.perf_counter()
                    try:
                        result = _one(name, args, tokenizer, server.url, level, tag)
                    except Exception as exc:  # a peer that fails is reported, the others go on
                        notes.append(f"{name} at concurrency {level}: {exc}")
                        continue
                    wall = time.perf_counter() - start
                    served = server.records()[before:]
                    cell = cells.setdefault((name, level), Cell())
                    leg_text = ""
                    if isinstance(result, dict):
                        over, leg = matched(result, served)
                        cell.request_leg_ms.append(leg)
                        leg_text = f", request leg P50 {leg:6.2f} ms"
                    else:
                        over = unmatched(result, served)
                    cell.overhead_ms.append(over)
                    print(f"rep {rep} {name:>9} c={level:<3} overhead P50 {over:7.2f} ms{leg_text} ({wall:.0f} s)",
                          flush=True)
    return cells, notes


def _one(name: str, args: argparse.Namespace, tokenizer: Path | None, url: str, level: int,
         tag: str) -> dict[str, tuple[float, float]] | list[float]:
    if name == "gpuscout":
        return run_gpuscout(url, level, args.requests, tag)
    if name == "minimal":
        return run_raw(url, level, args.requests, tag)
    assert tokenizer is not None
    if name == "GuideLLM":
        return run_guidellm(args.guidellm, tokenizer, url, level, args.requests)
    return run_aiperf(args.aiperf, tokenizer, url, level, args.requests)


def zero_server() -> AbstractContextManager[str]:
    return script_server("zero_latency_server.py", "--port", "0", "--max-seconds", "1800")


@contextmanager
def script_server(script: str, *args: str) -> Iterator[str]:
    """A server script of this folder in its own process: its URL, from the "PORT <n>" line it prints."""
    proc = subprocess.Popen([sys.executable, str(HERE / script), *args], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        yield f"http://127.0.0.1:{int(proc.stdout.readline().split()[1])}"
    finally:
        proc.terminate()
        proc.wait(10)


@dataclass
class Rate:
    rps: list[float] = field(default_factory=list)  # per repeat: requests / (last first chunk − first send)
    cpu_us: list[float] = field(default_factory=list)  # per repeat: client CPU µs per request


def rate_table(args: argparse.Namespace) -> dict[str, Rate]:
    """Requests completed per second at concurrency 64 against a zero-latency server, and the client CPU each
    request cost: on a shared VM the first swings with the neighbours, the second much less."""
    rates: dict[str, Rate] = {}
    n = args.rate_requests
    with zero_server() as url:
        for rep in range(args.repeats):
            for name, fn in (("minimal", lambda t, c: run_raw(url, 64, n, t, cpu=c)),
                             ("gpuscout", lambda t, c: run_gpuscout(url, 64, n, t, cpu=c)),
                             ("gpuscout --workers 2", lambda t, c: run_gpuscout(url, 64, n, t, workers=2, cpu=c))):
                rate = rates.setdefault(name, Rate())
                got = fn(f"rate-{rep}", rate.cpu_us)
                span = max(f for _, f in got.values()) - min(s for s, _ in got.values())
                rate.rps.append(len(got) / span)
                print(f"rep {rep} {name:>22}: {rate.rps[-1]:7.0f} req/s, {rate.cpu_us[-1]:6.1f} µs CPU a request",
                      flush=True)
    return rates


def markdown(cells: dict[tuple[str, int], Cell], rates: dict[str, Rate], notes: list[str],
             args: argparse.Namespace, load_before: str) -> str:
    names = list(dict.fromkeys(name for name, _ in cells))
    lines = [f"### Client overhead against the server's record ({time.strftime('%Y-%m-%d')})", "",
             f"Server: injected TTFT {TTFT_S * 1e3:g} ms, {TOKEN_S * 1e3:g} ms a token, {TOKENS} tokens; "
             f"{args.requests} requests per level, {args.repeats} interleaved repeat(s). Load average before: "
             f"{load_before}; after: {load_average()}.", "",
             "Client TTFT P50 − server first-byte time, ms (range over repeats); for gpuscout and the minimal "
             "client matched per request, with the request leg (server receipt − client send) in brackets.", "",
             "| concurrency | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for level in LEVELS:
        row = [str(level)]
        for name in names:
            cell = cells.get((name, level))
            if cell is None or not cell.overhead_ms:
                row.append("—")
                continue
            text = _span(cell.overhead_ms)
            if cell.request_leg_ms:
                text += f" ({_span(cell.request_leg_ms)})"
            row.append(text)
        lines.append("| " + " | ".join(row) + " |")
    if rates:
        lines += ["", "Sustained rate at concurrency 64 against a zero-latency server (range over repeats; the "
                  "rate a core gives = 10⁶ / the median CPU µs a request):", "",
                  "| client | req/s | client CPU a request, µs | req/s a core gives |", "|---|---|---|---|"]
        lines += [f"| {name} | {_span(r.rps, digits=0)} | {_span(r.cpu_us, digits=0)} | "
                  f"{1e6 / statistics.median(r.cpu_us):.0f} |" for name, r in rates.items()]
    lines += [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def _span(values: list[float], digits: int = 2) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.{digits}f}" if abs(hi - lo) < 10 ** -digits else f"{lo:.{digits}f}–{hi:.{digits}f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--guidellm", default=None, help="path of the guidellm executable (its own venv)")
    ap.add_argument("--aiperf", default=None, help="path of the aiperf executable (its own venv)")
    ap.add_argument("--requests", type=int, default=160)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rate-requests", type=int, default=3000)
    ap.add_argument("--no-rate", action="store_true", help="skip the sustained-rate table")
    ap.add_argument("--no-overhead", action="store_true", help="only the sustained-rate table")
    ap.add_argument("--out", type=Path, default=None, help="write the markdown tables here too")
    args = ap.parse_args()
    before = load_average()
    cells, notes = ({}, []) if args.no_overhead else overhead_table(args)
    rates = {} if args.no_rate else rate_table(args)
    text = markdown(cells, rates, notes, args, before)
    print("\n" + text)
    if args.out is not None:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
