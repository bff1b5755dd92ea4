"""The `skypilot` engine: one SkyPilot cluster per candidate, pinned to its offer, always downed at the end.

Each candidate becomes one SkyPilot task file, pinned to the offer: `infra` cloud/region, the exact
instance type, spot or not, the disk the job needs. It is written beside the candidate's results (the
record of what was launched) and launched from that file with `down=True` and an idle autostop, so a
cluster whose gpuscout died still goes away by itself: SkyPilot downs it after `idle_minutes` without a
job or an ssh session. The launches are asynchronous requests to SkyPilot's API server, so every
candidate's launch is in flight at once and they share one time window.

Once a cluster is up, SkyPilot makes it reachable as `ssh <cluster>` (its host entry is included from
~/.ssh/config), so the script is copied, run, stopped and its results brought back over plain ssh, as
SkyPilot's own docs do with `rsync <cluster>:...`: the run gets the script's real exit code, and a
remote `timeout` bounds it even when this machine goes away. Results are fetched before `sky down`
(the disk goes with the cluster). A down that fails is never hidden: the tear-down names `sky down
<cluster>` for the user.

Offers from a SkyPilot catalog (`vms.csv`) carry SkyPilot's own instance type and region, so they pin
exactly. Any other offer is refused before anything is launched, naming what is missing: a cloud
SkyPilot knows, a region, or an instance type SkyPilot's catalog has (SkyPilot checks the last itself;
docs/trial_skypilot.md §2).

What a user with SkyPilot credentials runs first, and what only a real cloud can show: docs/trial_skypilot.md
§1 and §6.

`sky` is imported when the engine is built, never when gpuscout is imported (the CLI's start-up time and
the import tests care), and can be handed in: the tests drive the whole lifecycle through a fake module
at this boundary.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import math
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from gpuscout.trial.engine import Box, EngineError, EngineName, LaunchRequest, RunOutcome, TearDown, log_tail
from gpuscout.userfile import printable

# SkyPilot's clouds, as its registry names them (`sky.CLOUD_REGISTRY` in skypilot 0.14.1).
SKY_CLOUDS = frozenset({
    "aws", "azure", "cudo", "do", "fluidstack", "gcp", "hyperbolic", "ibm", "kubernetes", "lambda", "mithril",
    "nebius", "oci", "paperspace", "primeintellect", "runpod", "scp", "seeweb", "shadeform", "slurm", "ssh",
    "vast", "verda", "vsphere", "yotta",
})  # fmt: skip
# Provider names as gpuscout's sheets write them -> SkyPilot's cloud. The SkyPilot catalog importer
# (hardware/skypilot.py) writes "AWS", "GCP", "Azure", "Lambda", "RunPod", "Vast.ai" or the cloud itself.
_PROVIDER_TO_CLOUD: Mapping[str, str] = {
    "vast.ai": "vast", "lambda labs": "lambda", "lambda cloud": "lambda", "google cloud": "gcp",
    "microsoft azure": "azure", "digitalocean": "do", "digital ocean": "do", "oracle cloud": "oci",
}  # fmt: skip

REMOTE_DIR = "gpuscout-trial"  # relative to the remote home: where the script runs and writes results/
RESULTS_DIR = "results"  # what the script writes under its working directory (trial/script.py)
TASK_FILE = "sky-task.yaml"
# Idle minutes before SkyPilot downs a cluster on its own: the safety net when gpuscout cannot tear it
# down (docs/trial_skypilot.md §4). Long enough to cover the gap between "up" and the script's start,
# and between its end and the fetch (both seconds); short enough that a leaked cluster bills minutes,
# not a night.
IDLE_MINUTES = 10
# The remote `timeout` sends SIGTERM at the run's deadline (the bench writes what finished), then SIGKILL.
KILL_AFTER_S = 30
STOP_GRACE_S = 30.0  # a stopped script's time to write what finished before it is killed
SSH_GRACE_S = 60.0  # the local wait beyond the remote deadline: connection set-up and the kill-after
CALL_TIMEOUT_S = 900.0  # one SkyPilot API call (a down: it waits for the cloud); a launch is bounded by wait_ready
COST_TIMEOUT_S = 120.0  # the cost report is set beside gpuscout's bill: not worth holding the trial's end for
# Cluster names: SkyPilot's CLUSTER_NAME_VALID_REGEX, and short enough for every cloud's limit
# (GCP's instance names are the tightest: SkyPilot appends its own suffix to the cluster name).
_CLUSTER_MAX = 30
SSH_OPTIONS = ("-o", "BatchMode=yes", "-o", "ConnectTimeout=30", "-o", "ServerAliveInterval=15",
               "-o", "ServerAliveCountMax=4")

T = TypeVar("T")


@dataclass(frozen=True)
class SkyPin:
    """Where SkyPilot must put one candidate: the offer's cloud, region and instance type exactly."""

    cloud: str
    region: str
    instance_type: str
    use_spot: bool
    disk_gb: int

    @property
    def infra(self) -> str:
        return f"{self.cloud}/{self.region}"


def pin(request: LaunchRequest) -> SkyPin:
    """The SkyPilot pin of a launch request, or EngineError naming what the offer lacks to be pinned."""
    missing = _unpinnable(request)
    if missing:
        raise EngineError(
            f"Offer {request.offer_id} cannot be pinned on SkyPilot: {'; '.join(missing)}. "
            "The skypilot engine launches exactly the offer that was priced, never the nearest thing. "
            "Take the candidates from SkyPilot's own catalog (--offers ~/.sky/catalogs/v8/<cloud>/vms.csv: "
            "its rows carry SkyPilot's instance types and regions), or run a box you rented by hand with "
            "--engine ssh.")
    return SkyPin(cloud=sky_cloud(request.provider) or "", region=request.region.strip(),
                  instance_type=request.instance_type.strip(), use_spot=request.spot, disk_gb=request.disk_gb)


def sky_cloud(provider: str) -> str | None:
    """SkyPilot's name for a provider as an offer names it ("AWS" -> "aws", "Vast.ai" -> "vast"), else None."""
    name = provider.strip().lower()
    name = _PROVIDER_TO_CLOUD.get(name, name)
    return name if name in SKY_CLOUDS else None


def _unpinnable(request: LaunchRequest) -> list[str]:
    missing = []
    if sky_cloud(request.provider) is None:
        missing.append(f"its provider {printable(request.provider, 60)!r} is not a SkyPilot cloud "
                       f"(SkyPilot knows {', '.join(sorted(SKY_CLOUDS))})")
    if not request.region.strip():
        missing.append("it names no region (SkyPilot would pick one, at another price)")
    instance = request.instance_type.strip()
    if not instance:
        missing.append("it names no instance type")
    elif re.search(r"\s", instance) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._:/+-]*", instance):
        missing.append(f"its product {printable(instance, 60)!r} is a description, not an instance type")
    if request.disk_gb < 1:
        missing.append(f"its disk need is {request.disk_gb} GB")
    return missing


def cluster_name(candidate: str, token: str) -> str:
    """A SkyPilot cluster name for a candidate, unique to this trial (`token`): a launch on an existing
    cluster's name would reuse that cluster, never what the offer names."""
    slug = re.sub(r"[^a-z0-9]+", "-", candidate.lower()).strip("-")[:12].strip("-") or "box"
    digest = hashlib.sha256(candidate.encode()).hexdigest()[:4]  # two long names cut to the same 12 differ
    name = f"gst-{slug}-{digest}-{token}"
    return name[:_CLUSTER_MAX].rstrip("-._")


def task_config(request: LaunchRequest, cluster: str, *, idle_minutes: int = IDLE_MINUTES) -> dict[str, Any]:
    """The SkyPilot task (as its YAML holds it) that provisions one candidate's box and runs nothing:
    the trial script is run over ssh, so its exit code and its deadline are gpuscout's."""
    where = pin(request)
    return {
        "name": cluster,
        "num_nodes": 1,
        "resources": {
            "infra": where.infra,
            "instance_type": where.instance_type,
            "use_spot": where.use_spot,
            "disk_size": where.disk_gb,
            # The same safety net the launch sets, kept in the file so a hand launch of it has it too.
            "autostop": {"idle_minutes": idle_minutes, "down": True},
        },
    }


def task_yaml(request: LaunchRequest, config: Mapping[str, Any]) -> str:
    """The task file's text: a header saying what it is, then the task (strings JSON-quoted: valid YAML)."""
    idle = config["resources"]["autostop"]["idle_minutes"]
    header = [
        f"# gpuscout trial: candidate {request.candidate}, offer {request.offer_id}",
        f"# ({request.gpu_count}x {request.gpu}; {'spot' if request.spot else 'on-demand'}).",
        "# The cluster is pinned to the offer and downs itself after "
        f"{idle} idle minutes. To launch it by hand:",
        f"#   sky launch -c {config['name']} --down -i {idle} {TASK_FILE}",
    ]
    return "\n".join(header + _yaml_lines(config, 0)) + "\n"


def _yaml_lines(mapping: Mapping[str, Any], indent: int) -> list[str]:
    lines = []
    pad = "  " * indent
    for key, value in mapping.items():
        if isinstance(value, Mapping):
            lines.append(f"{pad}{key}:")
            lines.extend(_yaml_lines(value, indent + 1))
        elif isinstance(value, bool):
            lines.append(f"{pad}{key}: {'true' if value else 'false'}")
        elif isinstance(value, int):
            lines.append(f"{pad}{key}: {value}")
        else:
            lines.append(f"{pad}{key}: {json.dumps(str(value))}")
    return lines


def load_sky() -> Any:
    """The `sky` module, imported now (never at gpuscout's import), or EngineError saying how to install it."""
    try:
        return importlib.import_module("sky")
    except ImportError as exc:
        raise EngineError(
            f"The skypilot engine needs SkyPilot, which is not installed here ({printable(str(exc), 120)}). "
            "Install it with: pip install 'gpuscout[skypilot]' 'skypilot[aws]' (name your clouds), "
            "then run `sky check` to see which clouds your credentials reach.") from None


class SkyPilotEngine:
    """Candidates as SkyPilot clusters, one per offer; task files and logs under `root/<candidate>/` (a
    folder of its own when no root is given; `run` copies the task file beside the candidate's script).

    Built without `sky`, it imports SkyPilot at once, so a missing extra is said before anything is planned
    to launch; the tests hand in a fake module instead."""

    name: EngineName = "skypilot"

    def __init__(self, root: Path | None = None, *, sky: Any = None, ssh: Sequence[str] = ("ssh",),
                 idle_minutes: int = IDLE_MINUTES, stop_grace_s: float = STOP_GRACE_S,
                 call_timeout_s: float = CALL_TIMEOUT_S, token: str | None = None,
                 remote_dir: str = REMOTE_DIR, sky_cli: Sequence[str] | None = None) -> None:
        if not remote_dir.strip() or "\n" in remote_dir:
            raise EngineError(f"The remote folder {remote_dir!r} is not a folder name; give a path such as "
                              f"{REMOTE_DIR!r} (relative to the cluster's home) or an absolute one.")
        self.root = root if root is not None else Path(tempfile.mkdtemp(prefix="gpuscout-skypilot-"))
        self.remote_dir = remote_dir
        self.sky_cli = tuple(sky_cli) if sky_cli is not None else (_sky_command(),)
        self._sky = sky if sky is not None else load_sky()
        self.ssh = tuple(ssh)
        self.idle_minutes = idle_minutes
        self.stop_grace_s = stop_grace_s
        self.call_timeout_s = call_timeout_s
        # One token per trial, in every cluster name: the trial's clusters are found together in `sky status`.
        self.token = token or hashlib.sha256(f"{time.time_ns()}".encode()).hexdigest()[:6]
        self._running: set[str] = set()
        self._lock = threading.Lock()

    # -- the SkyPilot boundary ----------------------------------------------------------------------

    @property
    def sky(self) -> Any:
        return self._sky

    def preflight(self, requests: Sequence[LaunchRequest]) -> None:
        """Refuse, before anything is launched, every candidate SkyPilot cannot pin exactly: the pin's
        fields first, then SkyPilot's own task parser, which checks the instance type against its catalog."""
        problems, configs = [], []
        for request in requests:
            try:
                configs.append((request, task_config(request, cluster_name(request.candidate, self.token),
                                                     idle_minutes=self.idle_minutes)))
            except EngineError as exc:
                problems.append(f"{request.candidate}: {exc}")
        if not problems:
            for request, config in configs:
                try:
                    self._parse(request, config)
                except EngineError as exc:
                    problems.append(f"{request.candidate}: {exc}")
        if problems:
            raise EngineError("\n".join(problems))

    def _parse(self, request: LaunchRequest, config: Mapping[str, Any]) -> Any:
        """The task as SkyPilot reads it, checked as SkyPilot checks it: `Resources.validate` (the cloud,
        region and instance type exist in its catalog), then the catalog's offering of that instance type,
        spot or not, in that region (what its optimizer would otherwise find only at launch)."""
        where = config["resources"]
        kind = f"{'spot ' if where['use_spot'] else ''}{where['instance_type']} in {where['infra']}"
        try:
            task = self.sky.Task.from_yaml_config(dict(config))
            for resources in task.resources:
                resources.validate()
                if _offered_regions(resources) == []:
                    raise EngineError(f"SkyPilot's catalog offers no {kind}")
        except EngineError as exc:
            said = str(exc)
        except Exception as exc:  # SkyPilot's own check of the pin: an unknown instance type or region
            said = _said(exc)
        else:
            return task
        raise EngineError(
            f"Offer {request.offer_id} cannot be pinned on SkyPilot: it refused {kind}: {said}. Take the "
            "candidate from SkyPilot's catalog (its vms.csv rows carry the exact instance type and region), "
            "or use --engine ssh.") from None

    # -- the engine ---------------------------------------------------------------------------------

    def launch(self, request: LaunchRequest) -> Box:
        """Write the candidate's task file and ask SkyPilot for the cluster; returns while it launches.

        A launch whose request could not be sent still returns the box (the request may have reached the
        API server before the error): `wait_ready` reports the error and `tear_down` downs the cluster.
        """
        cluster = cluster_name(request.candidate, self.token)
        config = task_config(request, cluster, idle_minutes=self.idle_minutes)
        folder = self.root / request.candidate
        path = folder / TASK_FILE
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path.write_text(task_yaml(request, config), encoding="utf-8")
        except OSError as exc:
            raise EngineError(f"Could not write the SkyPilot task file {path}: {exc}. Free the disk or "
                              "choose another -o folder.") from None
        task = self._parse(request, config)
        box = Box(request=request, engine="skypilot", launched_at=datetime.now(UTC), workdir=self.remote_dir,
                  handle={"cluster": cluster, "task_file": str(path)})
        try:
            box.handle["launch_request"] = str(self.sky.launch(task, cluster_name=cluster, down=True,
                                                               idle_minutes_to_autostop=self.idle_minutes))
        except Exception as exc:
            box.handle["launch_error"] = _said(exc)
        return box

    def wait_ready(self, box: Box, timeout_s: float) -> None:
        cluster = box.handle["cluster"]
        if "launch_error" in box.handle:
            raise EngineError(f"SkyPilot did not take the launch of {cluster}: {box.handle['launch_error']}. "
                              "Check that `sky api info` reaches the API server and `sky check` lists the cloud.")
        request_id = box.handle["launch_request"]
        try:
            self._call(lambda: self.sky.get(request_id), timeout_s, f"the launch of {cluster}")
        except EngineError:
            raise
        except Exception as exc:
            raise EngineError(
                f"SkyPilot could not launch {cluster} ({box.request.instance_type} in {box.request.region}): "
                f"{_said(exc)}. The cluster is downed with the others; try another offer, region or time.") from None
        box.handle["ready"] = "yes"
        self._make_reachable(cluster)
        box.ready_at = datetime.now(UTC)

    def run(self, box: Box, script: Path, timeout_s: float) -> RunOutcome:
        """Copy the script to the cluster and run it there under `timeout` (its own process group)."""
        cluster = box.handle["cluster"]
        if "down" in box.handle:
            raise EngineError(f"Cluster {cluster} was already torn down; nothing was run.")
        deadline = max(math.ceil(timeout_s), 1)
        here = shlex.quote(self.remote_dir)
        upload = f"mkdir -p {here} && cat > {here}/trial.sh"
        with script.open("rb") as source:
            sent = self._ssh(cluster, upload, stdin=source, timeout_s=self.call_timeout_s)
        if sent.returncode != 0:
            raise EngineError(f"Could not copy the trial script to {cluster} (ssh exit {sent.returncode}: "
                              f"{_text(sent.stderr)}). {_ssh_fix(cluster)}")
        # `exec` keeps the shell's pid for `timeout`, which makes itself a process group leader: the pid
        # file names the group that a stop (or the deadline) signals, children included.
        command = (f"cd {here} && echo $$ > trial.pid && "
                   f"exec timeout --kill-after={KILL_AFTER_S} {deadline} bash trial.sh")
        # The log and the task file that was launched go beside the candidate's script (its -o folder).
        log_path = script.parent / "trial.log"
        task_file = Path(box.handle["task_file"])
        if task_file.parent != script.parent:
            with contextlib.suppress(OSError):
                shutil.copyfile(task_file, script.parent / TASK_FILE)
        with self._lock:
            self._running.add(cluster)
        started = time.monotonic()
        try:
            with log_path.open("wb") as log:
                proc = subprocess.Popen([*self.ssh, *SSH_OPTIONS, cluster, command], stdin=subprocess.DEVNULL,
                                        stdout=log, stderr=subprocess.STDOUT)
                try:
                    code = proc.wait(timeout=deadline + KILL_AFTER_S + SSH_GRACE_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                    return RunOutcome(returncode=None, log_tail=log_tail(log_path), timed_out=True)
                except BaseException:  # Ctrl-C: the local ssh goes; the remote group is stopped by fetch/tear-down
                    proc.kill()
                    proc.wait()
                    raise
        finally:
            with self._lock:
                self._running.discard(cluster)
        elapsed = time.monotonic() - started
        if code == 255:
            raise EngineError(f"Lost the ssh connection to {cluster} while the script ran: "
                              f"{log_tail(log_path)[-300:].strip()}. {_ssh_fix(cluster)}")
        if code in (124, 137) and elapsed >= deadline:  # `timeout`'s own codes, at the deadline
            return RunOutcome(returncode=None, log_tail=log_tail(log_path), timed_out=True)
        return RunOutcome(returncode=code, log_tail=log_tail(log_path))

    def fetch(self, box: Box, local_dir: Path) -> Sequence[Path]:
        """Bring back `results/` as a tar stream over ssh (extracted with tarfile's `data` filter: no path
        leaves `local_dir`). A script still running (the trial is stopping) is stopped first, so what it
        finished is written before it is read."""
        cluster = box.handle["cluster"]
        if "launch_request" not in box.handle or "down" in box.handle:
            return []  # nothing launched, or its disk is gone with the cluster
        self._stop_script(cluster)
        command = (f"cd {shlex.quote(self.remote_dir)} 2>/dev/null || exit 0; "
                   f"if [ -d {RESULTS_DIR} ]; then tar -C {RESULTS_DIR} -cf - .; fi")
        with tempfile.TemporaryFile() as stream:
            done = self._ssh(cluster, command, stdout=stream, timeout_s=self.call_timeout_s)
            if done.returncode != 0:
                raise EngineError(f"Could not fetch the results of {cluster} (ssh exit {done.returncode}: "
                                  f"{_text(done.stderr)}). {_ssh_fix(cluster)} Before it is downed, copy them with: "
                                  f"scp -r {cluster}:{self.remote_dir}/{RESULTS_DIR} .")
            if stream.tell() == 0:
                return []
            stream.seek(0)
            local_dir.mkdir(parents=True, exist_ok=True)
            try:
                with tarfile.open(fileobj=stream, mode="r:") as archive:
                    members = [m for m in archive.getmembers() if m.isfile()]
                    archive.extractall(local_dir, members=members, filter="data")
            except (tarfile.TarError, OSError) as exc:
                raise EngineError(f"The results of {cluster} came back unreadable ({exc}); they stay on the "
                                  "cluster until it is downed.") from None
        return sorted(local_dir / m.name for m in members)

    def tear_down(self, box: Box) -> TearDown:
        """`sky down` the cluster (a launch still in flight is cancelled first). Safe to repeat; a cluster
        SkyPilot no longer knows is already gone; a down that fails names the command that finishes it."""
        cluster = box.handle["cluster"]
        command = f"sky down {cluster}"
        if box.handle.get("down") == "done":
            return TearDown(done=True, message=f"cluster {cluster} already downed")
        if "launch_request" not in box.handle and "launch_error" not in box.handle:
            box.handle["down"] = "done"
            box.torn_down_at = box.torn_down_at or datetime.now(UTC)
            return TearDown(done=True, message=f"cluster {cluster} was never requested")
        notes = []
        if "ready" not in box.handle and "launch_request" in box.handle:
            with contextlib.suppress(Exception):  # best effort: the down below is what stops the billing
                self.sky.api_cancel(box.handle["launch_request"], silent=True)
                notes.append("its launch cancelled")
        try:
            # Sent here, waited for below: once the API server has the request, the cluster goes down even
            # if this process is stopped while it waits (a second Ctrl-C).
            request_id = self.sky.down(cluster)
            self._call(lambda: self.sky.get(request_id), self.call_timeout_s, f"`{command}`")
        except Exception as exc:
            if _is_gone(self.sky, exc):
                message = f"cluster {cluster} is gone (SkyPilot no longer knows it)"
            else:
                box.handle["down"] = "failed"
                return TearDown(done=False, command=command,
                                message=f"SkyPilot could not down cluster {cluster}: {_said(exc)}; it may still bill. "
                                        f"Run `{command}`, then `sky status` to see it gone")
        else:
            message = f"cluster {cluster} downed"
        box.handle["down"] = "done"
        box.torn_down_at = datetime.now(UTC)
        return TearDown(done=True, message=message + (f" ({', '.join(notes)})" if notes else ""))

    def reported_cost(self, box: Box) -> float | None:
        """SkyPilot's cost report for this cluster (its own estimate from the catalog price and the time up)."""
        if "launch_request" not in box.handle:
            return None
        days = max(1, math.ceil((datetime.now(UTC) - box.launched_at).total_seconds() / 86400))
        records = self._call(lambda: self.sky.get(self.sky.cost_report(days=days)),
                             min(self.call_timeout_s, COST_TIMEOUT_S), "SkyPilot's cost report")
        return cost_of(records, box.handle["cluster"], box.launched_at)

    # -- helpers ------------------------------------------------------------------------------------

    def _make_reachable(self, cluster: str) -> None:
        """Write the cluster's ssh host entry. SkyPilot's SDK does not: its CLI does, and `sky status`
        is the documented way ("Running `sky status` will update the ssh config for the clusters locally,
        so that you can directly ssh into the clusters": `sky status --help`, skypilot 0.14.1)."""
        argv = [*self.sky_cli, "status", cluster]
        try:
            done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=self.call_timeout_s,
                                  check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise EngineError(f"Cluster {cluster} is up, but `{shlex.join(argv)}` (which writes its ssh host entry) "
                              f"failed: {exc}. Check that SkyPilot's `sky` command is on PATH.") from None
        if done.returncode != 0:
            raise EngineError(f"Cluster {cluster} is up, but `{shlex.join(argv)}` (which writes its ssh host entry) "
                              f"exited {done.returncode}: {_text(done.stderr or done.stdout)}.")

    def _stop_script(self, cluster: str) -> None:
        """SIGTERM the script's process group, then SIGKILL after the grace period (only while it runs)."""
        with self._lock:
            if cluster not in self._running:
                return
        tries = max(int(self.stop_grace_s / 0.5), 1)
        command = (f"cd {shlex.quote(self.remote_dir)} 2>/dev/null && [ -f trial.pid ] || exit 0; "
                   "pid=$(cat trial.pid); "
                   f"kill -TERM -- -$pid 2>/dev/null || exit 0; "
                   f"for i in $(seq {tries}); do kill -0 -- -$pid 2>/dev/null || exit 0; sleep 0.5; done; "
                   f"kill -KILL -- -$pid 2>/dev/null; exit 0")
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            self._ssh(cluster, command, timeout_s=self.stop_grace_s + SSH_GRACE_S)

    def _ssh(self, cluster: str, command: str, *, stdin: Any = subprocess.DEVNULL, stdout: Any = subprocess.PIPE,
             timeout_s: float) -> subprocess.CompletedProcess[bytes]:
        argv = [*self.ssh, *SSH_OPTIONS, cluster, command]
        try:
            return subprocess.run(argv, stdin=stdin, stdout=stdout, stderr=subprocess.PIPE, timeout=timeout_s,
                                  check=False)
        except subprocess.TimeoutExpired:
            raise EngineError(f"ssh to {cluster} did not finish in {timeout_s:.0f} s. {_ssh_fix(cluster)}") from None
        except OSError as exc:
            raise EngineError(f"Could not start {shlex.join(self.ssh)}: {exc}. Install the OpenSSH client.") from None

    def _call(self, fn: Callable[[], T], timeout_s: float, what: str) -> T:
        """Run a blocking SkyPilot call with a wall-clock bound (its SDK waits on the API server unbounded)."""
        result: list[T] = []
        error: list[BaseException] = []

        def target() -> None:
            try:
                result.append(fn())
            except BaseException as exc:  # handed to the caller's thread
                error.append(exc)

        worker = threading.Thread(target=target, name="sky-call", daemon=True)
        worker.start()
        worker.join(max(timeout_s, 0.0))
        if worker.is_alive():
            raise EngineError(f"SkyPilot did not finish {what} within {timeout_s:.0f} s; "
                              "`sky api status` shows the request, `sky status` the clusters.")
        if error:
            raise error[0]
        return result[0]


def cost_of(records: Any, cluster: str, launched_at: datetime) -> float | None:
    """The `total_cost` of this trial's cluster in a SkyPilot cost report (the newest record by the name,
    launched after the request: a cluster name reused by an older trial is not this one)."""
    since = launched_at.timestamp() - 120  # the report's clock is the API server's: allow a little skew
    best: tuple[float, float] | None = None
    for record in records or []:
        if not isinstance(record, Mapping) or record.get("name") != cluster:
            continue
        started, cost = record.get("launched_at"), record.get("total_cost")
        if not isinstance(cost, int | float) or isinstance(cost, bool) or not math.isfinite(cost) or cost < 0:
            continue
        when = float(started) if isinstance(started, int | float) and not isinstance(started, bool) else since
        if when >= since and (best is None or when > best[0]):
            best = (when, float(cost))
    return None if best is None else best[1]


def _sky_command() -> str:
    """SkyPilot's CLI: on PATH, or beside this interpreter (a venv's bin folder that is not on PATH)."""
    beside = Path(sys.executable).with_name("sky")
    return shutil.which("sky") or (str(beside) if beside.exists() else "sky")


def _offered_regions(resources: Any) -> list[Any] | None:
    """The regions SkyPilot's catalog offers these resources in; None where this SkyPilot cannot say."""
    try:
        return list(resources.cloud.regions_with_offering(
            resources.instance_type, resources.accelerators, resources.use_spot, resources.region, resources.zone,
            resources=resources))
    except (AttributeError, TypeError):  # an older or newer SkyPilot without this call: its launch will say
        return None


def _is_gone(sky: Any, exc: BaseException) -> bool:
    exceptions = getattr(sky, "exceptions", None)
    gone = getattr(exceptions, "ClusterDoesNotExist", None)
    return isinstance(gone, type) and isinstance(exc, gone)


def _said(exc: BaseException) -> str:
    text = str(exc).strip() or "no message"
    return printable(f"{type(exc).__name__}: {text}", 400)


def _text(data: bytes | None) -> str:
    return printable((data or b"").decode(errors="replace").strip() or "no message", 300)


def _ssh_fix(cluster: str) -> str:
    return (f"Check that `ssh {cluster}` works: SkyPilot writes the cluster's host entry under "
            "~/.sky/generated/ssh/ and includes it from ~/.ssh/config.")

