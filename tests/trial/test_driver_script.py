"""The one script: the same body on every candidate, a bundle that carries the job, and its early exits run
for real with bash (a broken install, another gpuscout version) so the driver reads the right exit codes."""

from __future__ import annotations

import base64
import io
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from gpuscout.errors import SpecError
from gpuscout.trial.script import (
    EXIT_INSTALL,
    MAX_BUNDLE_BYTES,
    ScriptSettings,
    body_sha256,
    bundle_job,
    script_body,
    trial_script,
)

SRC = Path(__file__).resolve().parents[2] / "src"
EXAMPLES = SRC / "gpuscout" / "examples"
MARKER = "# ---- the same on every candidate from here on ----"


def test_every_candidate_runs_the_same_body_under_its_own_header() -> None:
    body = script_body(ScriptSettings(version="0.1.0"), bundle_job(EXAMPLES / "tiny-finetune.toml",
                                                                    EXAMPLES / "prices.example.toml"))
    a = trial_script(body, candidate="a", offer_id="lambda-h100-sxm-1x", created_at_iso="2026-12-03T10:00:00Z")
    b = trial_script(body, candidate="b", offer_id="runpod-secure-h200", created_at_iso="2026-12-03T10:00:01Z")
    assert a.split(MARKER)[1] == b.split(MARKER)[1] == body.split(MARKER)[1]
    assert a.split(MARKER)[0] != b.split(MARKER)[0]
    assert body_sha256(body) == body_sha256(body) and len(body_sha256(body)) == 64
    for script in (a, b):
        checked = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
        assert checked.returncode == 0, checked.stderr


def test_the_bundle_carries_the_spec_its_model_folder_and_the_sheet_byte_for_byte() -> None:
    bundle = bundle_job(EXAMPLES / "tiny-finetune.toml", EXAMPLES / "prices.example.toml")
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(bundle.payload_b64))) as tar:
        names = sorted(tar.getnames())
        assert names == ["prices.example.toml", "tiny-finetune.toml", "tiny-llama/config.json"]
        for name in names:
            member = tar.extractfile(name)
            assert member is not None and member.read() == (EXAMPLES / name).read_bytes()
    # The same files give the same bundle (no times or owners in it): the body's hash is reproducible.
    assert bundle_job(EXAMPLES / "tiny-finetune.toml", EXAMPLES / "prices.example.toml") == bundle


def test_weights_next_to_the_spec_are_refused_with_the_way_out(tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text((EXAMPLES / "tiny-llama" / "config.json").read_text())
    (tmp_path / "model" / "weights.bin").write_bytes(os.urandom(MAX_BUNDLE_BYTES + 1))
    spec = tmp_path / "job.toml"
    spec.write_text((EXAMPLES / "tiny-finetune.toml").read_text().replace('"tiny-llama"', '"model"'))
    with pytest.raises(SpecError, match="carries at most") as caught:
        bundle_job(spec, EXAMPLES / "prices.example.toml")
    assert "Hugging Face id" in caught.value.fix


def run_script(tmp_path: Path, settings: ScriptSettings) -> tuple[int, str]:
    body = script_body(settings, bundle_job(EXAMPLES / "tiny-finetune.toml", EXAMPLES / "prices.example.toml"))
    path = tmp_path / "box" / "trial.sh"
    path.parent.mkdir()
    path.write_text(trial_script(body, candidate="a", offer_id="runpod-community-rtx4090", created_at_iso=""))
    done = subprocess.run(["bash", str(path)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": ""})
    return done.returncode, (path.parent / "results" / "steps.log").read_text()


def test_an_install_that_fails_stops_the_script_with_its_code_and_the_log(tmp_path: Path) -> None:
    code, steps = run_script(tmp_path, ScriptSettings(version="0.1.0", install="venv",
                                                      python=str(tmp_path / "no-such-python")))
    assert code == EXIT_INSTALL
    assert re.search(r"^\S+ install failed \(see results/install.log\)$", steps, re.MULTILINE), steps
    assert (tmp_path / "box" / "job" / "tiny-finetune.toml").is_file()  # the bundle unpacked first


def test_another_gpuscout_version_on_the_box_is_refused(tmp_path: Path) -> None:
    code, steps = run_script(tmp_path, ScriptSettings(version="9.9.9", install="current", python=sys.executable,
                                                      package_root=str(SRC)))
    assert code == EXIT_INSTALL
    assert "not 9.9.9" in steps and "doctor" not in steps
