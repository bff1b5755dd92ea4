"""The processes a test started: a process's descendants (read from /proc) and whether given ids are gone.

Checked by process id, so a test can say which process outlived its command, and a zombie (ended, not
yet reaped by a parent that is itself gone or busy) counts as gone.
"""

from __future__ import annotations

import time
from pathlib import Path


def children(pid: int) -> list[int]:
    """Process ids whose parent is `pid`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def descendants(pid: int) -> list[int]:
    """Every process below `pid`: its children, theirs, and so on."""
    found: list[int] = []
    frontier = [pid]
    while frontier:
        below = [c for p in frontier for c in children(p)]
        found += below
        frontier = below
    return found


def running(pids: list[int]) -> list[int]:
    """Those of `pids` that still run (a zombie has ended)."""
    return [p for p in pids if _state(p) not in ("Z", "X", "")]


def gone(pids: list[int], limit_s: float = 20.0) -> bool:
    """Whether every one of `pids` has ended within `limit_s`."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if not running(pids):
            return True
        time.sleep(0.1)
    return False


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""
