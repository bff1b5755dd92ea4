"""How fast does `gpuscout --help` start? Target: under 0.3 s.

Run: .venv/bin/python benchmarks/cli_startup.py
Runs `python -m gpuscout --help` (and the installed console script if present) 10 times each
after one warm-up and prints the median and max wall time.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time


def timed(cmd: list[str], repeats: int = 10) -> list[float]:
    subprocess.run(cmd, capture_output=True, check=True)  # warm the file cache
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(cmd, capture_output=True, check=True)
        out.append(time.perf_counter() - start)
    return out


def main() -> None:
    commands = [[sys.executable, "-m", "gpuscout", "--help"]]
    script = shutil.which("gpuscout")
    if script:
        commands.append([script, "--help"])
    commands.append([sys.executable, "-c", "pass"])  # the interpreter's own floor
    for cmd in commands:
        t = timed(cmd)
        print(f"{' '.join(cmd[-3:]):40s} median {statistics.median(t) * 1000:6.1f} ms  max {max(t) * 1000:6.1f} ms")


if __name__ == "__main__":
    main()
