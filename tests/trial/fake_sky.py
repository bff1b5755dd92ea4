"""A fake `sky` module for the skypilot engine's lifecycle tests: SkyPilot's client calls the engine makes,
with the same names and keywords (checked against the real SDK where it is installed), and a table of
clusters that a launch adds and only a down removes, so a test can see what would still bill.

As in SkyPilot, every call returns a request id at once and `get` waits for the request's result (or
raises its error). A launch that fails leaves its cluster behind (SkyPilot keeps a cluster whose
provisioning failed, for debugging), so only a down clears it.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any


class ClusterDoesNotExist(ValueError):
    pass


class ResourcesUnavailableError(Exception):
    pass


class FakeTask:
    def __init__(self, config: dict[str, Any], resources: list[FakeResources]) -> None:
        self.config = config
        self.resources = resources


class FakeResources:
    """What the engine reads of a task's resources: SkyPilot's `validate` and its catalog's offering."""

    def __init__(self, config: dict[str, Any], unknown: set[str], not_offered: set[str]) -> None:
        self.instance_type = config.get("instance_type")
        self.use_spot = bool(config.get("use_spot"))
        _, _, self.region = str(config.get("infra", "")).partition("/")
        self.accelerators: dict[str, int] | None = None
        self.zone = None
        self._unknown, self._not_offered = unknown, not_offered
        self.cloud = SimpleNamespace(regions_with_offering=self._regions)

    def validate(self) -> None:
        if self.instance_type in self._unknown:
            raise ValueError(f"Invalid instance type {self.instance_type!r} for cloud AWS.")

    def _regions(self, instance_type: str, accelerators: Any, use_spot: bool, region: str, zone: Any,
                 resources: Any = None) -> list[str]:
        return [] if instance_type in self._not_offered else [region]


class FakeSky:
    def __init__(self, unknown_instance_types: tuple[str, ...] = (), not_offered: tuple[str, ...] = ()) -> None:
        self.exceptions = SimpleNamespace(ClusterDoesNotExist=ClusterDoesNotExist,
                                          ResourcesUnavailableError=ResourcesUnavailableError)
        self.calls: list[tuple[str, Any]] = []
        self.clusters: dict[str, str] = {}  # name -> "INIT" | "UP": what still bills
        self.launch_errors: dict[str, BaseException] = {}  # cluster -> what its launch request raises
        self.launch_gates: dict[str, threading.Event] = {}  # cluster -> set when its launch may finish
        self.submit_errors: dict[str, BaseException] = {}  # cluster -> raised by `launch` itself
        self.down_errors: dict[str, list[BaseException]] = {}  # cluster -> raised by its next downs, in order
        self.down_gates: dict[str, threading.Event] = {}  # cluster -> set when its down may finish
        self.cost_records: list[dict[str, Any]] = []
        self.cancelled: list[str] = []
        self._requests: dict[str, Callable[[], Any]] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        unknown, offered_nowhere = set(unknown_instance_types), set(not_offered)
        calls = self.calls

        class Task(FakeTask):
            @classmethod
            def from_yaml_config(cls, config: dict[str, Any]) -> FakeTask:
                calls.append(("Task.from_yaml_config", config))
                return cls(config, [FakeResources(config.get("resources", {}), unknown, offered_nowhere)])

        self.Task = Task

    def _request(self, name: str, fn: Callable[[], Any]) -> str:
        request_id = f"{name}-{next(self._ids)}"
        self._requests[request_id] = fn
        return request_id

    def launch(self, task: FakeTask, cluster_name: str | None = None, *, down: bool = False,
               idle_minutes_to_autostop: int | None = None) -> str:
        assert cluster_name is not None
        self.calls.append(("launch", {"cluster": cluster_name, "down": down, "idle": idle_minutes_to_autostop,
                                      "config": task.config}))
        if cluster_name in self.submit_errors:
            raise self.submit_errors[cluster_name]
        with self._lock:
            self.clusters[cluster_name] = "INIT"

        def provision() -> tuple[int | None, str]:
            gate = self.launch_gates.get(cluster_name)
            if gate is not None:
                gate.wait()
            if cluster_name in self.launch_errors:
                raise self.launch_errors[cluster_name]
            with self._lock:
                if cluster_name not in self.clusters:
                    raise RuntimeError(f"cluster {cluster_name} was downed while it launched")
                self.clusters[cluster_name] = "UP"
            return None, f"handle-{cluster_name}"

        return self._request("launch", provision)

    def down(self, cluster_name: str) -> str:
        self.calls.append(("down", cluster_name))

        def tear() -> None:
            gate = self.down_gates.get(cluster_name)
            if gate is not None:
                gate.wait()
            errors = self.down_errors.get(cluster_name)
            if errors:
                raise errors.pop(0)
            with self._lock:
                if cluster_name not in self.clusters:
                    raise ClusterDoesNotExist(f"Cluster {cluster_name!r} does not exist.")
                del self.clusters[cluster_name]

        return self._request("down", tear)

    def api_cancel(self, request_ids: str | list[str] | None = None, all_users: bool = False,
                   silent: bool = False) -> str:
        self.calls.append(("api_cancel", request_ids))
        ids = [request_ids] if isinstance(request_ids, str) else list(request_ids or [])
        self.cancelled.extend(ids)
        return self._request("api_cancel", lambda: ids)

    def cost_report(self, days: int | None = None) -> str:
        self.calls.append(("cost_report", days))
        return self._request("cost_report", lambda: list(self.cost_records))

    def get(self, request_id: str) -> Any:
        return self._requests[request_id]()

    def called(self, name: str) -> list[Any]:
        return [args for call, args in self.calls if call == name]
