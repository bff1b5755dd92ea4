"""Where a load client's TTFT overhead lies: its send, the server's queue, or its receive side.

benchmarks/load_overhead.py measures client overhead = client TTFT − the server's first-byte time,
where the server's clock starts when its loop has parsed the request. A request that waits in the
server's socket buffer is then in the "client" figure. This benchmark runs gpuscout and the minimal
client of load_overhead.py against benchmarks/stamping_server.py, which also records when the kernel
received each request (SO_TIMESTAMPNS), and splits each request's overhead, P50 over the requests:

* send: client send stamp → kernel receive (the client's write and the loopback);
* server queue: kernel receive → the server has parsed it (the server's own loop);
* receive: the server's first write → the client's first-chunk stamp (the client's reads and the
  loopback; the server's write is stamped just before its send).

overhead = send + queue + receive. The client's own part is send + receive.

Run: `.venv/bin/python benchmarks/request_leg.py [--requests 160 --repeats 3]` (Linux only).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import urllib.request
from contextlib import AbstractContextManager
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "loadgen"))

from load_overhead import LEVELS, TOKEN_S, TTFT_S, load_average, run_gpuscout, run_raw, script_server  # noqa: E402

LEGS = ("overhead", "send", "queue", "receive")


def stamping_server() -> AbstractContextManager[str]:
    return script_server("stamping_server.py", "--ttft", str(TTFT_S), "--token-delay", str(TOKEN_S))


def records(url: str) -> dict[str, dict[str, float | list[float]]]:
    with urllib.request.urlopen(f"{url}/_records", timeout=30) as reply:
        return {r["prompt"]: r for r in json.load(reply)}


def legs(client: dict[str, tuple[float, float]], served: dict[str, dict[str, float | list[float]]]) -> dict[str, float]:
    """P50 of each leg, ms, over the requests both sides recorded."""
    parts: dict[str, list[float]] = {leg: [] for leg in LEGS}
    for prompt, (sent, first) in client.items():
        s = served.get(prompt)
        if s is None:
            continue
        kernel, received, writes = float(s["kernel_s"]), float(s["received_s"]), s["writes_s"]  # type: ignore[arg-type]
        first_write = float(writes[0])  # type: ignore[index]
        parts["overhead"].append((first - sent) - (first_write - received))
        parts["send"].append(kernel - sent)
        parts["queue"].append(received - kernel)
        parts["receive"].append(first - first_write)
    return {leg: statistics.median(v) * 1e3 for leg, v in parts.items() if v}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=160)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    if not sys.platform.startswith("linux"):
        print("SO_TIMESTAMPNS on TCP sockets is Linux's; nothing to measure here", file=sys.stderr)
        return 2
    before = load_average()
    table: dict[tuple[str, int], list[dict[str, float]]] = {}
    with stamping_server() as url:
        for rep in range(args.repeats):
            for level in LEVELS:
                for name, run in (("gpuscout", run_gpuscout), ("minimal", run_raw)):
                    got = run(url, level, args.requests, f"{name}-{rep}-{level}")
                    row = legs(got, records(url))
                    table.setdefault((name, level), []).append(row)
                    print(f"rep {rep} {name:>8} c={level:<3} " + ", ".join(f"{k} {v:.2f}" for k, v in row.items())
                          + " ms", flush=True)
    print(f"\nLoad average before: {before}; after: {load_average()}. P50 ms, range over {args.repeats} repeats.\n")
    print("| concurrency | client | overhead | send | server queue | receive | client's own (send + receive) |")
    print("|---|---|---|---|---|---|---|")
    for (name, level), rows in table.items():
        cells = [_span([r[leg] for r in rows]) for leg in LEGS]
        own = _span([r["send"] + r["receive"] for r in rows])
        print(f"| {level} | {name} | " + " | ".join(cells) + f" | {own} |")
    return 0


def _span(values: list[float]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.2f}" if hi - lo < 0.005 else f"{lo:.2f}–{hi:.2f}"


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
