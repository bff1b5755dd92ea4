"""A stand-in for `ssh [options] <cluster> <command>`, run as a real subprocess by the skypilot engine's tests.

It runs the remote command with bash in a folder of its own per host name (the "cluster"), with HOME set
there, so the engine's own command lines (upload, run under `timeout`, stop, tar) run for real. A host
with a `<host>.unreachable` file beside its folder answers as ssh does when the connection fails (exit
255). Every call is appended to `calls.log` (the options and the host) for the tests to read.
"""

from __future__ import annotations

import os
import sys

OPTIONS_WITH_VALUE = {"-o", "-p", "-i", "-F", "-l", "-J"}


def main() -> None:
    args = sys.argv[1:]
    options = []
    while args and args[0].startswith("-"):
        option = args.pop(0)
        options.append(option)
        if option in OPTIONS_WITH_VALUE and args:
            options.append(args.pop(0))
    host, command = args[0], " ".join(args[1:])
    root = os.environ["FAKE_SSH_ROOT"]
    with open(os.path.join(root, "calls.log"), "a", encoding="utf-8") as log:
        log.write(f"{host}\t{' '.join(options)}\t{command}\n")
    if os.path.exists(os.path.join(root, f"{host}.unreachable")):
        print(f"ssh: connect to host {host} port 22: Connection refused", file=sys.stderr)
        sys.exit(255)
    home = os.path.join(root, host)
    os.makedirs(home, exist_ok=True)
    os.chdir(home)
    os.execvpe("bash", ["bash", "-c", command], {**os.environ, "HOME": home})


if __name__ == "__main__":
    main()
