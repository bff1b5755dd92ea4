"""`gpuscout load` as a user runs it: a subprocess against the fake server, --json, -o, no key leak."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuscout.results.store import load_result

sys.path.insert(0, str(Path(__file__).parent.parent / "loadgen"))

from fake_openai import FakeConfig, FakeServer, serve_in_thread

ROOT = Path(__file__).parent.parent.parent
KEY = "sk-cli-secret-987654321"


def gpuscout(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuscout", *args], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin", "MY_KEY": KEY})


def test_one_liner_json_and_output_file(tmp_path: Path) -> None:
    out = tmp_path / "load.json"
    with serve_in_thread(FakeConfig(ttft_s=0.005, token_delay_s=0.001)) as srv:
        done = gpuscout("load", srv.url, "--model", "M", "--concurrency", "8", "--requests", "40", "--runs", "1",
                        "--output-tokens", "16", "--api-key-env", "MY_KEY", "--json", "-o", str(out))
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["kind"] == "load" and payload["cases"][0]["name"] == "concurrency 8"
    result = load_result(out)
    names = {m.name for m in result.cases[0].metrics}
    assert {"ttft_s", "tpot_s", "e2e_s", "output_tokens_per_s", "send_lag_s", "ttft_from_intended_s"} <= names
    assert (tmp_path / "load.workload.json").is_file() and result.fixed.data_hash
    assert srv.seen[0]["authorization"] == f"Bearer {KEY}"
    for text in (done.stdout, done.stderr, out.read_text(), (tmp_path / "load.workload.json").read_text()):
        assert KEY not in text
    compared = gpuscout("compare", str(out), str(out), "--format", "json")
    assert compared.returncode == 0, compared.stderr


def test_runs_are_interleaved_merged_per_level_and_record_region_and_billing(tmp_path: Path) -> None:
    out = tmp_path / "runs.json"
    with serve_in_thread(FakeConfig(ttft_s=0.002, token_delay_s=0.001)) as srv:
        done = gpuscout("load", srv.url, "--model", "M", "--sweep", "1,2", "--requests", "6", "--runs", "2",
                        "--output-tokens", "8", "--region", "us-east-1", "--billing", "spot", "-o", str(out))
        seen = len(srv.seen)  # 2 levels × 2 runs × 6 requests
    assert done.returncode == 0, done.stderr
    result = load_result(out)
    assert seen == 4 * 6 and [c.params["concurrency"] for c in result.cases] == [1, 2]
    for case in result.cases:
        assert case.runs == 2
        tps = next(m for m in case.metrics if m.name == "output_tokens_per_s")
        assert len(tps.runs) == 2 and len(tps.samples) == 2  # one reading per run: its interval is between runs
        ttft = next(m for m in case.metrics if m.name == "ttft_s")
        assert [len(r.samples) for r in ttft.runs] == [6, 6]
    assert (result.fixed.region, result.fixed.billing) == ("us-east-1", "spot")
    compared = gpuscout("compare", str(out), str(out), "--format", "json")
    verdict = json.loads(compared.stdout)["verdict"]
    assert verdict["winner"] is None
    # a run against itself: no difference (exit 0), or too noisy to say on a busy machine (no verdict: 4)
    assert compared.returncode == {"no difference": 0, "inconclusive": 4}[verdict["outcome"]], compared.stderr


def test_table_output_and_a_refused_url(tmp_path: Path) -> None:
    done = gpuscout("load", "http://127.0.0.1:9", "--model", "M", "--requests", "3")
    assert done.returncode == 5, done.stderr  # every request failed: the run measured nothing
    assert "ok/sent" in done.stdout  # the table is still printed, with what failed
    assert "every request failed to connect" in done.stderr and "Traceback" not in done.stderr


def test_malformed_url_exits_1_with_what_why_fix() -> None:
    done = gpuscout("load", "not a url", "--model", "M")
    assert done.returncode == 1
    assert "not an http" in done.stderr and "To fix" in done.stderr and "Traceback" not in done.stderr


def test_a_plan_of_a_billion_requests_is_refused_before_anything_is_sent() -> None:
    done = gpuscout("load", "http://127.0.0.1:9", "--model", "M", "--rate", "1e9", "--duration", "1000s")
    assert done.returncode == 1 and "at most 100,000" in done.stderr and "Traceback" not in done.stderr
    for bad in (["--timeout", "nan"], ["--timeout", "0"], ["--percentile", "150"], ["--sweep", "1,nan"]):
        done = gpuscout("load", "http://127.0.0.1:9", "--model", "M", *bad)
        assert done.returncode == 1 and "Traceback" not in done.stderr, (bad, done.stderr)


def _start(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "gpuscout", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})


def _wait_for(path: Path, proc: subprocess.Popen[str], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no checkpoint written"
        time.sleep(0.05)


def _wait_for_answers(server: FakeServer, proc: subprocess.Popen[str], more: int, timeout_s: float = 60) -> None:
    """Until the server has answered `more` requests beyond those it had answered now (its own record):
    watched for, not assumed after a sleep, which a busy machine outlasts."""
    def answered() -> int:
        return sum(r.end_s is not None for r in list(server.records))

    target = answered() + more
    deadline = time.monotonic() + timeout_s
    while answered() < target:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"the server answered fewer than {more} more requests"
        time.sleep(0.01)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name)
def test_a_signal_mid_run_keeps_the_finished_levels_and_requests(tmp_path: Path, sig: signal.Signals) -> None:
    """3 s levels; the signal lands after level 1's checkpoint and 10 more answers: level 1 whole, and every
    request the server had finished by the signal kept but the ones in flight. Five levels, not two, so a
    busy machine that starves the client for a few seconds cannot finish the run before the signal."""
    out = tmp_path / "load.json"
    with serve_in_thread(FakeConfig(ttft_s=0.005, token_delay_s=0.002)) as srv:
        proc = _start(["load", srv.url, "--model", "M", "--sweep", "1,2,2,2,2", "--duration", "3s",
                       "--output-tokens", "8", "-o", str(out)])
        _wait_for(out, proc)  # the checkpoint after level 1
        first = load_result(out)
        _wait_for_answers(srv, proc, 10)  # past the checkpoint: some later requests answered
        answered = sum(r.end_s is not None for r in list(srv.records))
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, stderr
    assert "Traceback" not in stderr and "Incomplete run" in stderr
    assert len(first.cases) == 1 and not first.complete
    result = load_result(out)
    assert not result.complete and 2 <= len(result.cases) <= 5
    assert any(f"interrupted by {sig.name}" in n for n in result.notes)
    assert any(n.startswith(f"invalid: interrupted by {sig.name}") for n in result.cases[-1].notes)
    kept = 0
    for case in result.cases:
        ttft = {m.name: m for m in case.metrics}["ttft_s"].summary
        kept += 0 if ttft is None else ttft.n
    # Lost: at most the 2 in flight (concurrency 2) at the signal and at each earlier level's end, where
    # the client cancels what the deadline cut off though the server may still finish it.
    assert kept >= answered - 2 * len(result.cases), (kept, answered, len(result.cases))
    assert (tmp_path / "load.workload.json").is_file()


def test_sigkill_loses_at_most_the_level_in_flight(tmp_path: Path) -> None:
    out = tmp_path / "load.json"
    with serve_in_thread(FakeConfig(ttft_s=0.005, token_delay_s=0.002)) as srv:
        proc = _start(["load", srv.url, "--model", "M", "--sweep", "1,2", "--duration", "3s", "--output-tokens", "8",
                       "-o", str(out)])
        _wait_for(out, proc)
        _wait_for_answers(srv, proc, 10)
        proc.kill()
        proc.communicate(timeout=60)
    result = load_result(out)
    assert not result.complete and len(result.cases) == 1 and "valid" in result.cases[0].notes
    assert (tmp_path / "load.workload.json").is_file()


def test_probe_prints_no_credentials() -> None:
    secret, token = "pw-cli-probe-0042", "tk-cli-probe-0042"
    with serve_in_thread(FakeConfig()) as srv:
        url = f"http://admin:{secret}@127.0.0.1:{srv.port}/v1/models?access_token={token}"
        for extra in ([], ["--json"]):
            done = gpuscout("probe", url, "--repeats", "2", *extra)
            assert done.returncode == 0, done.stderr
            assert secret not in done.stdout + done.stderr and token not in done.stdout + done.stderr


def test_production_traffic_options_and_pick_from_the_result(tmp_path: Path) -> None:
    """Shared prefixes with their control, the server's /metrics, a named GPU; then `pick --load` prices a
    serving job from that result on the GPU it was measured on."""
    out = tmp_path / "prefix.json"
    config = FakeConfig(ttft_s=0.005, token_delay_s=0.001, prefix_cache=True, prefill_s_per_token=0.0005)
    with serve_in_thread(config) as srv:
        done = gpuscout("load", srv.url, "--model", "M", "--concurrency", "2", "--requests", "24", "--runs", "1",
                        "--output-tokens", "8", "--prompt-tokens", "64", "--prefix-share", "0.75", "--prefix-groups",
                        "2", "--prefix-control", "--metrics-url", f"{srv.url}/metrics", "--usd-per-hour", "3.6",
                        "--server-gpu", "h100-sxm5-80gb", "--percentile", "50", "--json", "-o", str(out))
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert [c["name"] for c in payload["cases"]] == ["concurrency 2", "concurrency 2, no shared prefix"]
    assert payload["costs"][0]["prefix_saving_usd_per_1m_output_tokens"] > 0
    assert payload["fingerprint"]["gpu_name"] == "h100-sxm5-80gb" and "server_gpu" not in payload["fixed"]["settings"]
    spec = tmp_path / "serve.toml"
    spec.write_text('kind = "inference"\nmodel = "llama-3.1-8b"\nprompt_tokens = 64\noutput_tokens = 8\n'
                    'requests = 10000\n[slo]\nttft_p95_s = 5.0\n')
    picked = gpuscout("pick", str(spec), "--load", str(out), "--target-rps", "50", "--json", "--no-store")
    assert picked.returncode == 0, picked.stderr
    rows = {r["offer_id"]: r for r in json.loads(picked.stdout)["pick"]["rows"]}
    assert rows["lambda-h100-sxm-1x"]["bound"] == "measured" and rows["lambda-h100-sxm-1x"]["metrics"]["replicas"] >= 1
