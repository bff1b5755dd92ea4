"""The one script every candidate runs: install, doctor against the offer, stop on *return*, else bench.

The script is the same text on every box but for its header, which names the candidate's offer and
the box's creation time; `body_sha256` is recorded with the decision so the fairness of "the same
script" can be checked afterwards. Everything the script needs travels inside it (the job spec, the
files its model path names, the price sheet: a base64 tar), because an engine copies one file.

What the script leaves under `results/` (the engine's `fetch` brings it back), written as each step
finishes, so a box preempted or stopped half way keeps what finished:

* `steps.log`: one line per step with its UTC time (`install`, `doctor`, `bench`, and how each ended);
* `doctor.json`: the doctor result (`--created-at` set: the start-up is measured);
* `bench.json`: the bench result, with the doctor verdict attached (`--doctor`), written after every case.

Exit codes: 0 benched; 3 the doctor said *return* (nothing benched, tear down at once); 20 the install
failed; 21 the doctor could not run; 22 the bench failed; 128 + N stopped by signal N.
"""

from __future__ import annotations

import base64
import hashlib
import io
import shlex
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from gpuscout.errors import SpecError

InstallMode = Literal["venv", "current"]

EXIT_BENCHED, EXIT_RETURN = 0, 3
EXIT_INSTALL, EXIT_DOCTOR, EXIT_BENCH = 20, 21, 22
EXIT_MEANINGS = {EXIT_BENCHED: "benched", EXIT_RETURN: "the doctor said return", EXIT_INSTALL: "install failed",
                 EXIT_DOCTOR: "the doctor could not run", EXIT_BENCH: "the bench failed"}
# A bundle larger than this is not a job spec and a model config: weights do not travel in a script.
MAX_BUNDLE_BYTES = 8 * 1024 * 1024
RESULTS_DIR = "results"


@dataclass(frozen=True)
class ScriptSettings:
    """What every candidate runs the same way (the fixed variables of the trial)."""

    version: str  # the gpuscout version installed on every box
    install: InstallMode = "venv"
    # "current": the interpreter and the folder holding the gpuscout package, reused as they are
    python: str = "python3"
    package_root: str = ""
    pip_args: str = ""  # extra `pip install` arguments (an index mirror, --no-index --find-links DIR)
    extras: str = "bench"
    device: str = "auto"
    runs: int = 3
    warmup: int = 2
    repeats: int = 5
    seed: int = 0
    quick_doctor: bool = True


@dataclass(frozen=True)
class JobBundle:
    """The job spec, the files it names next to it, and the price sheet, packed for the script."""

    spec_name: str
    sheet_name: str
    payload_b64: str
    files: tuple[str, ...]


def bundle_job(spec: Path, sheet: Path) -> JobBundle:
    """Pack the spec, the folder its relative model path names (a config.json, a tokenizer), and the sheet."""
    from gpuscout.workload.jobs import load_job_ref

    job, base_dir = load_job_ref(str(spec))
    base = base_dir or spec.parent
    sheet_name = sheet.name if sheet.name != spec.name else f"sheet-{sheet.name}"
    members: list[tuple[Path, str]] = [(spec, spec.name), (sheet, sheet_name)]
    model = getattr(job, "model", None)
    if isinstance(model, str) and model and (base / model).exists():
        folder = base / model
        paths = [folder] if folder.is_file() else sorted(p for p in folder.rglob("*") if p.is_file())
        members += [(p, str(p.relative_to(base))) for p in paths]
    size = sum(p.stat().st_size for p, _ in members)
    if size > MAX_BUNDLE_BYTES:
        raise SpecError(f"The job's files come to {size / 1e6:,.1f} MB; the trial script carries at most "
                        f"{MAX_BUNDLE_BYTES / 1e6:,.0f} MB.",
                        "The script carries the job spec, its model's config and the price sheet, not weights.",
                        "Point the spec's model at a Hugging Face id or a preset (`gpuscout model --list`), "
                        "so each box downloads what it needs.")
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz", compresslevel=9) as tar:
        for path, name in members:
            info = tar.gettarinfo(str(path), arcname=name)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            with path.open("rb") as f:
                tar.addfile(info, f)
    return JobBundle(spec_name=spec.name, sheet_name=members[1][1],
                     payload_b64=base64.b64encode(raw.getvalue()).decode(), files=tuple(n for _, n in members))


def script_body(settings: ScriptSettings, bundle: JobBundle) -> str:
    """The part of the script that is the same on every candidate."""
    q = shlex.quote
    gs_common = f"--device {q(settings.device)} --seed {settings.seed} --no-store"
    quick = " --quick" if settings.quick_doctor else ""
    if settings.install == "venv":
        install = f"""step install
{q(settings.python)} -m venv .venv >> {RESULTS_DIR}/install.log 2>&1 \\
  && .venv/bin/python -m pip install --quiet {settings.pip_args} \\
       {q(f"gpuscout[{settings.extras}]=={settings.version}")} >> {RESULTS_DIR}/install.log 2>&1 \\
  || {{ step "install failed (see {RESULTS_DIR}/install.log)"; exit {EXIT_INSTALL}; }}
GS=(.venv/bin/python -m gpuscout)"""
    else:
        root = f"export PYTHONPATH={q(settings.package_root)}${{PYTHONPATH:+:$PYTHONPATH}}\n" \
            if settings.package_root else ""
        install = f"""step "install skipped: reusing {settings.python} (recorded as a fairness deviation)"
{root}GS=({q(settings.python)} -m gpuscout)"""
    return f"""# ---- the same on every candidate from here on ----
cd "$(dirname "$0")" || exit {EXIT_INSTALL}
mkdir -p {RESULTS_DIR} job
step() {{ printf '%s %s\\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$1" >> {RESULTS_DIR}/steps.log; echo "trial: $1"; }}
step start
printf '%s' {q(bundle.payload_b64)} | base64 -d | tar -xzf - -C job \\
  || {{ step "the job bundle did not unpack"; exit {EXIT_INSTALL}; }}
{install}
found=$("${{GS[0]}}" -c 'from importlib.metadata import version; print(version("gpuscout"))' 2>/dev/null)
[ "$found" = {q(settings.version)} ] \\
  || {{ step "gpuscout here is ${{found:-missing}}, not {settings.version}"; exit {EXIT_INSTALL}; }}
step doctor
"${{GS[@]}}" doctor --offers job/{q(bundle.sheet_name)} --offer "$OFFER" --job job/{q(bundle.spec_name)} \\
  ${{CREATED_AT:+--created-at "$CREATED_AT"}}{quick} {gs_common} -o {RESULTS_DIR}/doctor.json
rc=$?
case $rc in
  0) step "doctor says keep";;
  4) step "doctor inconclusive: benching, the verdict is recorded with the bench";;
  3) step "doctor says return"; exit {EXIT_RETURN};;
  129|130|143) step "stopped by signal $((rc - 128))"; exit $rc;;
  *) step "doctor exit $rc"; exit {EXIT_DOCTOR};;
esac
step bench
"${{GS[@]}}" bench job/{q(bundle.spec_name)} --offers job/{q(bundle.sheet_name)} --offer "$OFFER" \\
  ${{CREATED_AT:+--created-at "$CREATED_AT"}} --runs {settings.runs} --warmup {settings.warmup} \\
  --repeats {settings.repeats} {gs_common} --doctor {RESULTS_DIR}/doctor.json -o {RESULTS_DIR}/bench.json
rc=$?
case $rc in
  0) step "bench done"; exit {EXIT_BENCHED};;
  129|130|143) step "stopped by signal $((rc - 128))"; exit $rc;;
  *) step "bench exit $rc"; exit {EXIT_BENCH};;
esac
"""


def body_sha256(body: str) -> str:
    return hashlib.sha256(body.encode()).hexdigest()


def trial_script(body: str, *, candidate: str, offer_id: str, created_at_iso: str) -> str:
    """The whole script for one candidate: its header (which offer, when the box was created), then the body.
    `created_at_iso` is "" for a box the trial did not create (ssh): doctor then measures the start-up from
    the box's boot, not from a creation time nobody here knows."""
    q = shlex.quote
    return f"""#!/usr/bin/env bash
# gpuscout trial: candidate {candidate}. Written by `gpuscout trial`; the body below the marked line is
# byte for byte the same on every candidate (its sha256 is recorded with the decision).
set -u
OFFER={q(offer_id)}
CREATED_AT={q(created_at_iso)}
{body}"""
