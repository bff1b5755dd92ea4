"""`gpuscout doctor` as a user runs it on a machine without a GPU: real torchrun workers with a real
2-process gloo all-reduce, a real HTTP server on 127.0.0.1, result files, exit codes, Ctrl-C."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gpuscout import api
from gpuscout.doctor.verdict import EXIT_CODES
from gpuscout.errors import SpecError
from gpuscout.measure.harness import BenchSettings
from gpuscout.results.schema import BenchResult
from gpuscout.results.store import load_result

pytestmark = pytest.mark.slow  # each doctor run starts torchrun and two torch workers: ~15 s on 2 cores

ROOT = Path(__file__).parent.parent.parent
BODY = b"x" * (1 << 20)


def gpuscout(*args: str, cwd: Path = ROOT, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuscout", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd, env={"COLUMNS": "100", "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # kept-alive connections, as the probe's round trips expect

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/blob"
    httpd.shutdown()
    httpd.server_close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory, server: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path_factory.mktemp("doctor") / "doctor.json"
    done = gpuscout("doctor", "--device", "cpu", "--nproc", "2", "--quick", "--url", server, "-o", str(out), "--json",
                    "--store", str(out.parent / "store.sqlite"), cwd=out.parent)
    return done, out


def test_a_doctor_run_is_recorded_in_the_results_store(quick_run: tuple[subprocess.CompletedProcess[str],
                                                                        Path]) -> None:
    done, out = quick_run
    assert "recorded in the results store as run 1" in done.stderr
    listed = gpuscout("results", "list", "--kind", "doctor", "--json", "--store", str(out.parent / "store.sqlite"))
    runs = json.loads(listed.stdout)["runs"]
    outcome = load_result(out).doctor.outcome  # type: ignore[union-attr]
    assert [(r["kind"], r["summary"].split(",")[0]) for r in runs] == [("doctor", outcome)]


def test_doctor_on_the_cpu_runs_a_real_two_process_gloo_all_reduce(quick_run: tuple[subprocess.CompletedProcess[str],
                                                                                       Path]) -> None:
    done, out = quick_run
    assert "Traceback" not in done.stderr
    result = load_result(out)
    assert result.kind == "doctor" and result.complete and result.doctor is not None
    assert done.returncode == EXIT_CODES[result.doctor.outcome]
    assert json.loads(done.stdout)["exit_code"] == done.returncode
    reduce = next(c for c in result.cases if c.name == "all-reduce")
    assert reduce.failure is None and reduce.params["backend"] == "gloo" and reduce.params["world_size"] == 2
    metrics = {m.name: m for m in reduce.metrics}
    assert metrics["wrong_elements"].value == 0  # the two workers really summed each other's data
    assert all(m.value > 0 for name, m in metrics.items() if name.startswith("busbw_"))
    pairs = next(c for c in result.cases if c.name == "gpu-to-gpu copies")
    assert {m.name for m in pairs.metrics} == {"p2p_0_to_1_bytes_per_s", "p2p_1_to_0_bytes_per_s"}
    assert {c.name for c in result.cases} >= {"matmul bf16 · worker 0", "matmul bf16 · worker 1", "disk sequential",
                                              "checkpoint save/load", "network"}


def test_the_network_check_measures_the_url_it_was_given(quick_run: tuple[subprocess.CompletedProcess[str],
                                                                          Path], server: str) -> None:
    network = next(c for c in load_result(quick_run[1]).cases if c.name == "network")
    assert network.failure is None and network.params["url"] == server
    download = next(m for m in network.metrics if m.name == "download_bytes_per_s")
    assert download.value > 0 and len(download.samples) == 5


def test_a_url_that_does_not_answer_fails_its_check_and_the_rest_goes_on(tmp_path: Path) -> None:
    out = tmp_path / "d.json"
    done = gpuscout("doctor", "--device", "cpu", "--nproc", "2", "--quick", "--url",
                    f"http://127.0.0.1:{closed_port()}/", "-o", str(out), cwd=tmp_path)
    result = load_result(out)
    assert result.doctor is not None and result.doctor.outcome == "inconclusive"
    assert done.returncode == 4 and "Traceback" not in done.stderr
    network = next(c for c in result.cases if c.name == "network")
    assert network.failure is not None and network.failure.kind == "unreachable"
    assert "Cannot connect to 127.0.0.1" in network.failure.message
    errors = [f for f in result.doctor.findings if f.status == "error"]
    assert [f.check for f in errors] == ["network"]
    assert any(c.name == "all-reduce" and c.failure is None for c in result.cases)  # the rest went on


def test_bad_input_is_a_three_part_error(tmp_path: Path) -> None:
    too_many = gpuscout("doctor", "--device", "cpu", "--nproc", "99", cwd=tmp_path)
    assert too_many.returncode == 1 and "--nproc 99, but this machine has" in too_many.stderr
    unknown = gpuscout("doctor", "--device", "cpu", "--offers", "prices.example", "--offer", "lambda-h100-sxm-9x",
                       cwd=tmp_path)
    assert unknown.returncode == 1 and "No offer 'lambda-h100-sxm-9x'" in unknown.stderr
    assert "Did you mean lambda-h100-sxm-8x" in unknown.stderr
    bad_url = gpuscout("doctor", "--device", "cpu", "--url", "ftp://example.com/x", cwd=tmp_path)
    assert bad_url.returncode == 1 and "is not an http or https URL" in bad_url.stderr
    for done in (too_many, unknown, bad_url):
        assert "Traceback" not in done.stderr and "To fix" in done.stderr
    assert not list(tmp_path.iterdir())  # refused before anything ran


def test_ctrl_c_writes_what_finished_and_exits_130(tmp_path: Path) -> None:
    out = tmp_path / "d.json"
    proc = subprocess.Popen([sys.executable, "-m", "gpuscout", "doctor", "--device", "cpu", "--nproc", "2", "-o",
                             str(out)], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "COLUMNS": "100"})
    deadline = time.monotonic() + 120
    while not out.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)  # the result is first written once the disk check is done
    time.sleep(2.0)  # into the workers' step
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in stderr
    result = load_result(out)
    assert not result.complete and result.doctor is not None
    assert any(c.failure is not None and c.failure.kind == "interrupted" for c in result.cases)
    assert any(c.name == "disk sequential" and c.failure is None for c in result.cases)
    assert "interrupted during the workers step" in " ".join(f.message for f in result.doctor.findings)


def test_compare_reads_two_doctor_results(quick_run: tuple[subprocess.CompletedProcess[str], Path],
                                          tmp_path: Path) -> None:
    second = tmp_path / "b.json"
    result = load_result(quick_run[1])
    second.write_text(result.model_copy(update={"name": "doctor again"}).model_dump_json())
    done = gpuscout("compare", str(quick_run[1]), str(second), "--format", "md")
    assert done.returncode == 0, done.stderr
    assert "# gpuscout compare: doctor --quick (doctor)" in done.stdout and "## Verdict" in done.stdout
    assert "Case `all-reduce`" in done.stdout


def test_bench_carries_the_doctor_result_of_its_own_machine_and_refuses_another(
        quick_run: tuple[subprocess.CompletedProcess[str], Path], tmp_path: Path) -> None:
    doctor_file = quick_run[1]
    settings = BenchSettings(device="cpu", warmup=0, repeats=1, runs=1)
    report = api.bench("tiny-finetune", settings=settings, doctor=doctor_file, output=tmp_path / "b.json")
    stored = load_result(tmp_path / "b.json")
    assert stored.doctor is not None and stored.doctor.file == str(doctor_file)
    assert stored.doctor.outcome == load_result(doctor_file).doctor.outcome  # type: ignore[union-attr]
    assert report.result.doctor == stored.doctor
    foreign = tmp_path / "foreign.json"
    data = json.loads(doctor_file.read_text())
    data["doctor"]["machine"]["host"] = "0" * 16
    foreign.write_text(json.dumps(data))
    with pytest.raises(SpecError, match="was written on another machine: it was written on another host"):
        api.bench("tiny-finetune", settings=settings, doctor=foreign)
    with pytest.raises(SpecError, match="is a finetune result, not a doctor result"):
        api.bench("tiny-finetune", settings=settings, doctor=tmp_path / "b.json")
    assert isinstance(BenchResult.model_validate_json(doctor_file.read_text()), BenchResult)
