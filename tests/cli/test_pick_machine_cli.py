"""`gpuscout pick` with the job's dataset somewhere: real subprocesses, the transfer in the JSON, clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).parent.parent.parent / "examples"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuscout", *args], capture_output=True, text=True,
                          timeout=120, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})


def test_a_dataset_in_another_region_is_priced_per_offer() -> None:
    out = run("pick", str(EXAMPLES / "llama3-8b-qlora.toml"), "--offers", str(EXAMPLES / "prices.example.toml"),
              "--dataset-gb", "500", "--dataset-region", "aws:us-west-2", "--json")
    assert out.returncode == 0, out.stderr
    rows = [r for r in json.loads(out.stdout)["pick"]["rows"] if r["excluded"] is None]
    by_id = {r["offer_id"]: r["machine"]["transfer"] for r in rows}
    aws = by_id["aws-p4d-24xlarge-us-east-1"]  # same cloud, another US region: inter-region
    assert (aws["route"], aws["egress_usd"], aws["seconds"]) == ("inter-region", 10.0, 4000.0)
    lambda_ = by_id["lambda-h100-sxm-1x"]  # another cloud: AWS's internet egress
    assert (lambda_["route"], lambda_["egress_usd"]) == ("internet", 45.0)
    for row in rows:  # every bill carries the pull in its billed time and the source's egress as a line
        names = [line["name"] for line in row["cost"]["lines"]]
        assert "dataset egress (at the source)" in names


def test_a_region_of_no_known_cloud_is_a_user_error() -> None:
    out = run("pick", "--dataset-gb", "5", "--dataset-region", "mars-base")
    assert out.returncode == 1
    assert "cannot tell which cloud" in out.stderr and "CLOUD:REGION" in out.stderr
    assert "Traceback" not in out.stderr
