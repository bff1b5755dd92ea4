"""The load client over HTTPS: a real TLS server on 127.0.0.1 with a certificate made for the test.

The client verifies certificates as any HTTPS client must (`ssl.create_default_context`), so the test's
own certificate is trusted through OpenSSL's standard `SSL_CERT_FILE` variable, as a user would trust
an internal CA; an untrusted one is a failed request with the reason, never a traceback.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path

import pytest
from fake_openai import serve_in_thread

from gpuscout.loadgen.client import run_load_sync
from gpuscout.loadgen.metrics import summarize_load
from gpuscout.loadgen.schedule import LoadShape
from gpuscout.loadgen.workload import synthetic_workload

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return cert, key


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context


def test_a_load_over_https_pairs_every_request_with_the_servers_record(
        certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate[0]))
    with serve_in_thread(tls=server_context(*certificate)) as srv:
        assert srv.url.startswith("https://")
        run = run_load_sync(srv.url, "m", synthetic_workload(6, prompt_tokens=16, output_tokens=8),
                            LoadShape(kind="concurrency", concurrency=2, requests=6))
    assert [r.error for r in run.records] == [None] * 6
    assert len(srv.records) == 6 and all(r.status == 200 for r in srv.records)
    assert all(len(r.chunk_s) >= 8 for r in run.records)  # every token streamed through TLS
    ttft = next(m for m in summarize_load(run, slo=None).metrics if m.name == "ttft_s")
    assert ttft.summary is not None and ttft.summary.n == 6


def test_an_untrusted_certificate_fails_each_request_with_the_reason(certificate: tuple[Path, Path],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    with serve_in_thread(tls=server_context(*certificate)) as srv:
        run = run_load_sync(srv.url, "m", synthetic_workload(2, prompt_tokens=16, output_tokens=4),
                            LoadShape(kind="concurrency", concurrency=1, requests=2))
    assert srv.records == []  # nothing reached the handler: the handshake failed
    assert all(r.error and r.error.startswith("connect") for r in run.records)
    assert all("CERTIFICATE_VERIFY_FAILED" in (r.error or "") or "certificate" in (r.error or "").lower()
               for r in run.records)
