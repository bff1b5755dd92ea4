"""A stand-in for SkyPilot's `sky` command in the skypilot engine's tests: records its arguments in
$FAKE_SSH_ROOT/sky-cli.log (the engine runs `sky status <cluster>` so that `ssh <cluster>` works) and
exits 0, or 1 with SkyPilot-like words when $FAKE_SSH_ROOT/<cluster>.no-status exists."""

from __future__ import annotations

import os
import sys

root = os.environ["FAKE_SSH_ROOT"]
with open(os.path.join(root, "sky-cli.log"), "a", encoding="utf-8") as log:
    log.write(" ".join(sys.argv[1:]) + "\n")
if os.path.exists(os.path.join(root, f"{sys.argv[-1]}.no-status")):
    print("Could not connect to SkyPilot API server", file=sys.stderr)
    sys.exit(1)
