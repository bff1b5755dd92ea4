"""`load --endpoint images` against a real diffusers pipeline behind examples/diffusers_images_server.py.

The pipeline is Stable Diffusion built from tiny configs with random weights (nothing downloaded):
tokenizer, text encoder, UNet steps, VAE decode and PNG encoding all run for every request. The
client's timings are held against the server's own record of each request, not against a budget.
"""

from __future__ import annotations

import base64
import json
import statistics
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuscout.cost.load_cost import price_load
from gpuscout.loadgen.client import run_load_sync
from gpuscout.loadgen.metrics import summarize_load
from gpuscout.loadgen.schedule import LoadShape
from gpuscout.loadgen.workload import Prompt, Workload

pytest.importorskip("diffusers")

SERVER = Path(__file__).resolve().parents[2] / "examples" / "diffusers_images_server.py"


@pytest.fixture(scope="module")
def diffusers_server() -> Iterator[str]:
    proc = subprocess.Popen([sys.executable, str(SERVER), "--tiny", "--port", "0", "--steps", "3"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # after the pipeline is built and warmed up
        assert line.startswith("PORT "), f"the server did not start (exit {proc.poll()})"
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        proc.terminate()
        proc.wait(30)
        if proc.stdout is not None:
            proc.stdout.close()


def records(url: str) -> dict[str, dict[str, float]]:
    with urllib.request.urlopen(f"{url}/_records", timeout=30) as resp:
        return {r["prompt"]: r for r in json.load(resp)}


def prompts(n: int, tag: str) -> Workload:
    return Workload(prompts=tuple(Prompt(text=f"{tag} {i}: a watercolour fox", prompt_tokens=8, output_tokens=1)
                                  for i in range(n)), source="synthetic", seed=0, tokenizer=None, description=tag)


def test_a_real_diffusers_pipeline_is_timed_per_image_as_the_server_made_them(diffusers_server: str) -> None:
    work = prompts(12, "c2")
    shape = LoadShape(kind="concurrency", concurrency=2, requests=10, warmup_requests=2)
    run = run_load_sync(diffusers_server, "tiny-sd", work, shape, endpoint="images", api_key_env=None,
                        extra_body={"size": "32x32"})
    served = records(diffusers_server)
    measured = [r for r in run.records if not r.warmup]
    assert all(r.error is None and r.images == 1 for r in measured), [r.error for r in measured]
    case = summarize_load(run, slo=None, percentile_needed=50)
    spans = []
    for r in measured:
        s = served[work.prompts[(shape.warmup_requests + r.index) % len(work.prompts)].text]  # the client's order
        assert s["images"] == 1
        client_s, server_s = r.end_s - r.sent_s, s["end_s"] - s["received_s"]
        assert client_s >= server_s, (client_s, server_s)  # the client's span holds the server's, never less
        spans.append((client_s, server_s))
    # What the client reports per image is what the server spent on it plus the wire, not more: the median
    # difference is small against the median generation (each waits for the other's turn at the lock).
    extra = statistics.median(c - s for c, s in spans)
    assert extra < 0.25 * statistics.median(s for _, s in spans), spans
    p50 = next(m for m in case.metrics if m.name == "seconds_per_image").summary.p50
    assert p50 == pytest.approx(statistics.median(c for c, _ in spans), rel=0.01)
    cost = price_load(case, 3.6)
    images_per_s = next(m for m in case.metrics if m.name == "images_per_s").value
    assert cost.usd_per_1000_images == pytest.approx(0.001 / images_per_s * 1000)


def test_the_server_answers_pngs_and_refuses_bad_requests(diffusers_server: str) -> None:
    def post(body: object) -> tuple[int, dict[str, object]]:
        req = urllib.request.Request(f"{diffusers_server}/v1/images/generations", json.dumps(body).encode(),
                                     {"content-type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.status, json.load(resp)
        except urllib.error.HTTPError as err:
            return err.code, json.load(err)

    status, answer = post({"prompt": "a fox", "n": 2, "size": "16x24"})
    assert status == 200
    images = [base64.b64decode(d["b64_json"]) for d in answer["data"]]  # type: ignore[attr-defined, index]
    assert len(images) == 2 and all(i.startswith(b"\x89PNG\r\n\x1a\n") for i in images)
    for bad in ({"n": 1}, {"prompt": "x", "n": 0}, {"prompt": "x", "size": "30x30"}, {"prompt": "x", "size": "big"}):
        status, answer = post(bad)
        assert status == 400 and "must" in answer["error"]["message"], (bad, answer)  # type: ignore[index]
