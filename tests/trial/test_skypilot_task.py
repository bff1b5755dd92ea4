"""The skypilot engine's task files: each candidate pinned to its offer exactly, or refused naming what the
offer lacks. The files are held as golden files, and parsed by SkyPilot's own task parser where SkyPilot is
installed (here, or in the interpreter GPUSCOUT_SKYPILOT_PYTHON names), against SkyPilot catalogs made from
the same vms.csv fixtures the importer's tests read."""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import shutil
import subprocess
import sys
import textwrap
from datetime import date
from pathlib import Path

import pytest

from gpuscout.hardware.offers import Offer
from gpuscout.hardware.price_sheet import load_price_sheet
from gpuscout.hardware.skypilot import import_skypilot_catalog
from gpuscout.trial.engine import EngineError, LaunchRequest
from gpuscout.trial.engines import skypilot
from gpuscout.trial.engines.skypilot import SkyPilotEngine, cluster_name, pin, task_config, task_yaml
from trial.fake_sky import FakeSky

TESTS = Path(__file__).resolve().parents[1]
CATALOGS = TESTS / "hardware" / "data"
GOLDEN = Path(__file__).with_name("data") / "skypilot"
EXAMPLE_SHEET = TESTS.parent / "examples" / "prices.example.toml"
TOKEN = "a1b2c3"


def as_request(offer: Offer, disk_gb: int = 120) -> LaunchRequest:
    """A launch request as the trial driver builds one from an offer."""
    return LaunchRequest(candidate=offer.id.lower().replace(".", "-"), offer_id=offer.id, provider=offer.provider,
                         region=offer.region, instance_type=offer.product, gpu=offer.gpu, gpu_count=offer.gpu_count,
                         spot=offer.tier == "spot", disk_gb=disk_gb, max_wall_s=1800.0)


def catalog_offer(cloud: str, offer_id: str) -> Offer:
    imported = import_skypilot_catalog(CATALOGS / f"skypilot_{cloud}_vms.csv", cloud=cloud,
                                       observed_at=date(2026, 11, 1))
    (offer,) = [o for o in imported.offers if o.id == offer_id]
    return offer


# One candidate per cloud the fixtures cover, on-demand and spot.
CASES = {
    "aws-p4d-on-demand": catalog_offer("aws", "aws-p4d.24xlarge-us-east-1a"),
    "aws-g6e-spot": catalog_offer("aws", "aws-g6e.xlarge-us-east-1a-spot"),
    "gcp-a2-highgpu-1g": catalog_offer("gcp", "gcp-a2-highgpu-1g-us-central1-a"),
    "lambda-8x-h100": catalog_offer("lambda", "lambda-gpu_8x_h100_sxm5-us-east-1"),
}


def task_text(offer: Offer) -> str:
    request = as_request(offer)
    return task_yaml(request, task_config(request, cluster_name(request.candidate, TOKEN)))


@pytest.mark.parametrize("case", sorted(CASES))
def test_task_files_match_their_golden_files(case: str) -> None:
    path = GOLDEN / f"{case}.yaml"
    text = task_text(CASES[case])
    if os.environ.get("GPUSCOUT_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"no golden file {path}: run with GPUSCOUT_UPDATE_GOLDEN=1 and review it"
    assert text == path.read_text(encoding="utf-8")


def test_an_offer_from_a_skypilot_catalog_pins_exactly() -> None:
    spot = pin(as_request(CASES["aws-g6e-spot"], disk_gb=333))
    assert (spot.cloud, spot.region, spot.instance_type, spot.use_spot, spot.disk_gb) == \
        ("aws", "us-east-1", "g6e.xlarge", True, 333)
    assert spot.infra == "aws/us-east-1"
    assert pin(as_request(CASES["lambda-8x-h100"])).infra == "lambda/us-east-1"


def test_every_example_offer_is_pinned_or_refused_naming_what_is_missing() -> None:
    sheet = load_price_sheet(EXAMPLE_SHEET)
    outcomes: dict[str, str] = {}
    for offer in sheet.offers:
        try:
            outcomes[offer.id] = pin(as_request(offer)).infra
        except EngineError as exc:
            outcomes[offer.id] = str(exc)
    assert outcomes["aws-p5-48xlarge-us-east-1"] == "aws/us-east-1"  # a hand-written sheet with exact names
    assert outcomes["gcp-a2-highgpu-1g-us-central1"] == "gcp/us-central1"
    lam = outcomes["lambda-h100-sxm-8x"]
    assert "cannot be pinned on SkyPilot" in lam and "names no region" in lam
    assert "'8x NVIDIA H100 SXM' is a description, not an instance type" in lam
    assert "--offers ~/.sky/catalogs/v8/<cloud>/vms.csv" in lam and "--engine ssh" in lam
    assert "provider 'AutoDL' is not a SkyPilot cloud" in outcomes["autodl-rtx4090-placeholder"]
    assert "is a description" in outcomes["vast-a100-sxm4-80gb-median"]


def test_preflight_refuses_every_unpinnable_candidate_before_anything_launches(tmp_path: Path) -> None:
    sky = FakeSky(unknown_instance_types=("p9.mega",), not_offered=("p5.48xlarge",))
    engine = SkyPilotEngine(tmp_path, sky=sky, token=TOKEN)
    good = as_request(CASES["aws-p4d-on-demand"])
    bad_type = LaunchRequest(**{**good.__dict__, "candidate": "typo", "instance_type": "p9.mega"})
    no_region = LaunchRequest(**{**good.__dict__, "candidate": "anywhere", "region": ""})
    with pytest.raises(EngineError) as refused:
        engine.preflight([good, bad_type, no_region])
    lines = str(refused.value).splitlines()
    assert len(lines) == 1 and lines[0].startswith("anywhere: ") and "names no region" in lines[0]
    with pytest.raises(EngineError) as refused:
        engine.preflight([good, bad_type])
    (line,) = str(refused.value).splitlines()
    assert line.startswith("typo: ") and "refused p9.mega in aws/us-east-1" in line
    assert "Invalid instance type 'p9.mega'" in line  # SkyPilot's own words
    elsewhere = LaunchRequest(**{**good.__dict__, "candidate": "p5", "instance_type": "p5.48xlarge", "spot": True})
    with pytest.raises(EngineError, match=r"p5: .*SkyPilot's catalog offers no spot p5\.48xlarge in aws/us-east-1"):
        engine.preflight([good, elsewhere])
    assert sky.called("launch") == []
    engine.preflight([good])


def test_without_skypilot_the_engine_says_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sky", None)  # `import sky` raises ImportError
    with pytest.raises(EngineError) as missing:
        SkyPilotEngine(tmp_path, token=TOKEN)  # at once: before any candidate is planned to launch
    assert "pip install 'gpuscout[skypilot]'" in str(missing.value) and "sky check" in str(missing.value)


def test_importing_the_engine_does_not_import_sky() -> None:
    code = ("import sys, gpuscout.trial.engines.skypilot as m; "
            "assert 'sky' not in sys.modules, 'sky imported'; print(m.SkyPilotEngine.name)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "skypilot"


def test_cluster_names_are_valid_unique_and_short() -> None:
    import re

    names = {cluster_name(c, TOKEN) for c in ("a", "A", "aws-p4d.24xlarge-us-east-1a", "aws-p4d.24xlarge-us-east-1b",
                                              "-" * 50, "x" * 200)}
    assert len(names) == 6
    for name in names:
        assert re.fullmatch(r"[a-zA-Z]([-_.a-zA-Z0-9]*[a-zA-Z0-9])?", name) and len(name) <= 30, name
        assert name.endswith(TOKEN)


# -- SkyPilot's own parser ---------------------------------------------------------------------------

CHECKER = textwrap.dedent("""
    import inspect, json, sys
    from pathlib import Path
    import sky
    cases = json.loads(sys.argv[1])
    out = {"version": sky.__version__, "tasks": {}, "refused": {}, "signatures": {}}
    for name, path in cases["files"].items():
        task = sky.Task.from_yaml(path)
        (r,) = list(task.resources)
        auto = r.autostop_config
        out["tasks"][name] = {"name": task.name, "num_nodes": task.num_nodes, "cloud": str(r.cloud).lower(),
            "region": r.region, "instance_type": r.instance_type, "use_spot": r.use_spot,
            "disk_size": r.disk_size, "autostop": [auto.enabled, auto.idle_minutes, auto.down],
            "accelerators": r.accelerators}
    from gpuscout.trial.engine import EngineError, LaunchRequest
    from gpuscout.trial.engines.skypilot import SkyPilotEngine
    engine = SkyPilotEngine(Path(cases["root"]), token="a1b2c3")
    for name, fields in cases["requests"].items():
        try:
            engine.preflight([LaunchRequest(**fields)])
            out["refused"][name] = None
        except EngineError as exc:
            out["refused"][name] = str(exc)
    for fn in ("launch", "down", "cost_report", "api_cancel", "get"):
        out["signatures"][fn] = list(inspect.signature(getattr(sky, fn)).parameters)
    out["ClusterDoesNotExist"] = hasattr(sky.exceptions, "ClusterDoesNotExist")
    print("RESULT" + json.dumps(out))
""")


def skypilot_python() -> str | None:
    if importlib.util.find_spec("sky") is not None:
        return sys.executable
    named = os.environ.get("GPUSCOUT_SKYPILOT_PYTHON", "")
    return named if named and shutil.which(named) else None


def test_skypilot_s_own_parser_reads_the_task_files_as_pinned(tmp_path: Path) -> None:
    python = skypilot_python()
    if python is None:
        pytest.skip("SkyPilot is not installed here, nor named by GPUSCOUT_SKYPILOT_PYTHON: the task files were "
                    "checked against their golden files only, not against SkyPilot's parser")
    home = tmp_path / "home"
    for cloud in ("aws", "gcp", "lambda"):  # SkyPilot's catalogs, offline: the same rows the offers came from
        folder = home / ".sky" / "catalogs" / "v8" / cloud
        folder.mkdir(parents=True)
        shutil.copyfile(CATALOGS / f"skypilot_{cloud}_vms.csv", folder / "vms.csv")
    files = {}
    for case, offer in CASES.items():
        files[case] = str(tmp_path / f"{case}.yaml")
        Path(files[case]).write_text(task_text(offer), encoding="utf-8")
    # the engine's own preflight, with this SkyPilot: every case passes; a typo, an instance type in a region
    # the catalog does not offer it in, or spot where the catalog has no spot price is refused
    requests = {case: as_request(offer).__dict__ for case, offer in CASES.items()}
    good = requests["aws-p4d-on-demand"]
    requests |= {"typo": {**good, "instance_type": "p9.mega"},
                 "not-in-region": {**requests["lambda-8x-h100"], "region": "us-west-3"},
                 "no-spot": {**good, "instance_type": "p5.48xlarge", "spot": True}}
    env = {"HOME": str(home), "PATH": os.environ.get("PATH", ""), "SKYPILOT_DISABLE_USAGE_COLLECTION": "1",
           "PYTHONPATH": str(TESTS.parent / "src")}
    cases = {"files": files, "requests": requests, "root": str(tmp_path / "out")}
    done = subprocess.run([python, "-c", CHECKER, json.dumps(cases)], capture_output=True,
                          text=True, timeout=300, env=env, cwd=tmp_path, check=False)
    results = [line for line in done.stdout.splitlines() if line.startswith("RESULT")]
    assert done.returncode == 0 and results, done.stdout[-2000:] + done.stderr[-3000:]
    out = json.loads(results[0][len("RESULT"):])
    for case, offer in CASES.items():
        task = out["tasks"][case]
        request = as_request(offer)
        assert task["name"] == cluster_name(request.candidate, TOKEN) and task["num_nodes"] == 1
        assert (task["cloud"], task["region"], task["instance_type"]) == \
            (skypilot.sky_cloud(offer.provider), offer.region, offer.product)
        assert task["use_spot"] == (offer.tier == "spot") and task["disk_size"] == 120
        assert task["autostop"] == [True, skypilot.IDLE_MINUTES, True]
        # SkyPilot reads the GPUs off the instance type: the offer's count, nothing added by gpuscout
        assert sum(task["accelerators"].values()) == offer.gpu_count
    refused = out["refused"]
    assert all(refused[case] is None for case in CASES), refused
    assert "Invalid instance type 'p9.mega'" in refused["typo"]
    assert "offers no gpu_8x_h100_sxm5 in lambda/us-west-3" in refused["not-in-region"]
    assert "offers no spot p5.48xlarge in aws/us-east-1" in refused["no-spot"]
    # the keywords the engine (and the fake module its lifecycle tests use) pass exist in this SkyPilot
    sig = out["signatures"]
    assert {"cluster_name", "down", "idle_minutes_to_autostop"} <= set(sig["launch"])
    assert sig["down"][0] == "cluster_name" and "days" in sig["cost_report"] and "silent" in sig["api_cancel"]
    assert out["ClusterDoesNotExist"]
    fake = FakeSky()
    for fn in ("launch", "down", "cost_report", "api_cancel"):
        assert set(inspect.signature(getattr(fake, fn)).parameters) <= set(sig[fn]), fn
