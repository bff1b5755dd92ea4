"""`gpuscout load` against a real serving engine on CPU: llama.cpp's OpenAI-compatible server.

The test writes a tiny random-weight Llama as GGUF (tests/loadgen/tiny_gguf.py), starts
``python -m llama_cpp.server`` on a free 127.0.0.1 port, and drives it with gpuscout's client (API) and
with the CLI (``gpuscout load … --json -o``). It checks what a synthetic fake cannot: that a real
engine's SSE stream, its ``usage`` reporting and its handling of ``ignore_eos``/``min_tokens``/
``stream_options`` work with the client, and that the timings come out positive and plausible.

Skips with the reason when ``llama-cpp-python[server]`` or ``gguf`` is not installed (CI installs
both through the ``test`` extra).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_client import assert_valid

from gpuscout.loadgen.client import run_load_sync
from gpuscout.loadgen.metrics import summarize_load
from gpuscout.loadgen.schedule import LoadShape
from gpuscout.loadgen.traffic import conversation_workload, shared_prefix_workload
from gpuscout.loadgen.workload import synthetic_workload
from gpuscout.results.store import load_result

from .tiny_gguf import write_tiny_llama_gguf

pytestmark = pytest.mark.slow

_MISSING = [
    m for m in ("llama_cpp", "gguf", "uvicorn", "fastapi", "sse_starlette") if importlib.util.find_spec(m) is None
]
if _MISSING:
    pytest.skip(
        f"llama.cpp peer test needs `llama-cpp-python[server]` and `gguf` (missing: {', '.join(_MISSING)}); "
        "install the project's `test` extra",
        allow_module_level=True,
    )

OUTPUT_TOKENS = 8
START_TIMEOUT_S = 45.0
LOGS: dict[str, Path] = {}  # the server's log (its stderr: llama-cpp-python reports prefix reuse there)
PREFIX_HIT = re.compile(r"Llama\.generate: (\d+) prefix-match hit, remaining (\d+) prompt tokens to eval")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A llama.cpp server on a tiny GGUF; yields its base URL and always stops it."""
    tmp = tmp_path_factory.mktemp("llamacpp")
    model = write_tiny_llama_gguf(tmp / "tiny-llama.gguf")
    port = _free_port()
    log = (tmp / "server.log").open("wb")
    LOGS["server"] = tmp / "server.log"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(model),
        "--model_alias",
        "tiny",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        "512",
        "--n_threads",
        "1",
        # llama-cpp-python cancels the running completion when a new request arrives unless told not to
        "--interrupt_requests",
        "False",
    ]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"llama.cpp server exited with {proc.returncode}:\n{_tail(tmp / 'server.log')}")
            try:
                with urllib.request.urlopen(f"{base}/v1/models", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"llama.cpp server not up after {START_TIMEOUT_S:g} s:\n{_tail(tmp / 'server.log')}")
            time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _tail(path: Path, n: int = 3000) -> str:
    return path.read_text(errors="replace")[-n:]


def test_client_against_llamacpp(llama_server: str) -> None:
    workload = synthetic_workload(8, prompt_tokens=16, output_tokens=OUTPUT_TOKENS, seed=0)
    shape = LoadShape(kind="concurrency", concurrency=2, requests=8)
    run = run_load_sync(llama_server, "tiny", workload, shape, api_key_env=None, timeout_s=30)

    records = [r for r in run.records if not r.warmup]
    assert len(records) == 8
    assert all(r.error is None and r.status == 200 for r in records), [r.error for r in records]
    for r in records:
        assert r.first_chunk_s is not None and r.end_s is not None
        ttft = r.first_chunk_s - r.sent_s
        assert 0 < ttft < 10, ttft  # a 2-layer, 64-wide model: milliseconds, queueing included
        assert r.sent_s <= r.first_chunk_s <= r.end_s
        # the model emits one printable token per step and never </s>: one content chunk per output token
        assert len(r.chunk_s) == OUTPUT_TOKENS, r.chunk_s
        assert list(r.chunk_s) == sorted(r.chunk_s)
        tpot = (r.chunk_s[-1] - r.chunk_s[0]) / (len(r.chunk_s) - 1)
        # 0 when every token arrived in one read: a busy machine can leave a fast stream to the socket buffer
        assert 0 <= tpot < 2, tpot
        # llama-cpp-python (0.3.x) ignores stream_options.include_usage: no usage in the stream, and the
        # client must record that as unknown rather than invent a number
        assert r.output_tokens_server in (None, OUTPUT_TOKENS)
        assert r.count_issue is None and r.pinned  # its counts pass the cross-checks; it accepted ignore_eos
    assert run.client_cpu_s >= 0 and run.wall_s > 0
    case = summarize_load(run, slo=None, percentile_needed=50)  # P50: 8 requests are enough samples
    assert_valid(case)  # an honest engine stays valid under the count checks


def test_client_non_streaming_usage_against_llamacpp(llama_server: str) -> None:
    workload = synthetic_workload(4, prompt_tokens=16, output_tokens=OUTPUT_TOKENS, seed=1)
    shape = LoadShape(kind="concurrency", concurrency=2, requests=4)
    for endpoint in ("chat", "completions"):
        run = run_load_sync(llama_server, "tiny", workload, shape, endpoint=endpoint, stream=False,
                            api_key_env=None, timeout_s=30)  # fmt: skip
        records = [r for r in run.records if not r.warmup]
        assert len(records) == 4
        for r in records:
            assert r.error is None and r.status == 200, r.error
            assert r.first_chunk_s is not None and r.end_s is not None and r.first_chunk_s > r.sent_s
            # server usage from the response body: the pinned output length, and the prompt as tokenized
            assert r.output_tokens_server == OUTPUT_TOKENS, (endpoint, r.output_tokens_server)
            assert r.prompt_tokens_server is not None and r.prompt_tokens_server > 0
            assert r.count_issue is None


def test_cli_against_llamacpp(llama_server: str, tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    cmd = [
        sys.executable,
        "-m",
        "gpuscout",
        "load",
        llama_server,
        "--model",
        "tiny",
        "--concurrency",
        "2",
        "--requests",
        "8",
        "--runs",
        "1",
        "--output-tokens",
        str(OUTPUT_TOKENS),
        "--prompt-tokens",
        "16",
        "--json",
        "-o",
        str(out),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=dict(os.environ, NO_COLOR="1"))
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    json.loads(proc.stdout)  # --json prints one JSON document

    result = load_result(out)
    assert result.kind == "load"
    assert result.cases, "one case per load level"
    case = result.cases[0]
    assert case.failure is None
    metrics = {m.name: m for m in case.metrics}
    for name in ("ttft_s", "tpot_s", "e2e_s"):
        assert name in metrics, sorted(metrics)
        m = metrics[name]
        # TPOT is 0 for a request whose tokens all came in one read (a 2-layer model is that fast)
        assert m.samples and all(s > 0 or (name == "tpot_s" and s == 0) for s in m.samples), (name, m.samples)
    assert len(metrics["ttft_s"].samples) == 8
    assert 0 < metrics["ttft_s"].value < 10
    assert 0 < metrics["tpot_s"].value < 2
    assert metrics["e2e_s"].value >= metrics["ttft_s"].value
    if "error_rate" in metrics:
        assert metrics["error_rate"].value == 0


def _hits(after: int) -> list[tuple[int, int]]:
    """(reused, evaluated) prompt tokens of every request the server logged after byte `after` of its log."""
    text = LOGS["server"].read_text(errors="replace")[after:]
    return [(int(a), int(b)) for a, b in PREFIX_HIT.findall(text)]


def _log_size() -> int:
    return len(LOGS["server"].read_text(errors="replace"))


def test_shared_prefixes_are_reused_by_llamacpp_as_the_workload_built_them(llama_server: str) -> None:
    """One group, sent one at a time: after the first, each request reuses at least its shared prefix (the
    server's own log says how many tokens it reused and how many it evaluated); the control reuses little."""
    shape = LoadShape(kind="concurrency", concurrency=1, requests=6)
    shared = shared_prefix_workload(6, prompt_tokens=24, output_tokens=4, prefix_share=0.75, groups=1, seed=5)
    control = shared_prefix_workload(6, prompt_tokens=24, output_tokens=4, prefix_share=0.75, groups=1, seed=5,
                                     unshared=True)
    start = _log_size()
    run = run_load_sync(llama_server, "tiny", shared, shape, endpoint="completions", api_key_env=None, timeout_s=30)
    hits = _hits(start)
    middle = _log_size()
    runc = run_load_sync(llama_server, "tiny", control, shape, endpoint="completions", api_key_env=None,
                         timeout_s=30)
    control_hits = _hits(middle)
    assert all(r.error is None for r in (*run.records, *runc.records)), [r.error for r in run.records]
    prefix_chars = len(" ".join(shared.prompts[0].text.split()[:18]))  # the tiny vocabulary: a token a character
    assert len(hits) >= 5, hits
    assert all(reused >= prefix_chars for reused, _ in hits[-5:]), (prefix_chars, hits)
    assert sum(r for r, _ in control_hits[-5:]) < sum(r for r, _ in hits[-5:]) / 4, (control_hits, hits)


def test_conversation_turns_reuse_their_history_on_llamacpp(llama_server: str) -> None:
    """Each turn resends the history with the server's own answers: the server reuses it from its cache."""
    work = conversation_workload(2, turns=3, prompt_tokens=6, output_tokens=4, seed=2)
    start = _log_size()
    run = run_load_sync(llama_server, "tiny", work, LoadShape(kind="sessions", concurrency=1, requests=6),
                        api_key_env=None, timeout_s=30)
    hits = _hits(start)
    records = [r for r in run.records if not r.warmup]
    assert [r.turn for r in records] == [1, 2, 3, 1, 2, 3], [(r.turn, r.error) for r in records]
    assert all(r.error is None and r.chunk_s for r in records)
    # Every request reuses something (at least the chat template's first tokens), so the log has one line each,
    # in the order sent: turn k reuses all that turn k − 1 sent, less the few tokens of the template's end.
    assert len(hits) == len(records), hits
    for before, after, record in zip(hits, hits[1:], records[1:], strict=False):
        if record.turn != 1:
            assert after[0] >= sum(before) - 4, (before, after)
    case = summarize_load(run, slo=None, percentile_needed=50)
    assert {m.name for m in case.metrics} >= {"ttft_turn_1_s", "ttft_turn_2_s", "ttft_turn_3_s"}
