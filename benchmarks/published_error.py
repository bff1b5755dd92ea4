"""gpuscout (and its peers) against published measurements: validation/published/*.toml → validation/published.md.

Run: .venv/bin/python benchmarks/published_error.py [--out validation/published.md] [--json F]
         [--baseline-src DIR --baseline-label L] [--no-peers] [--write-margins [PATH]]

1. Loads every point of validation/published/*.toml and checks its format; a malformed point is
   reported by file and id (on stderr and in the report) and the run goes on without it.
2. Estimates exactly the quantity each point measured, through gpuscout's library API
   (parse_job, resolve_llm / resolve_image, the catalog, estimate_memory, estimate_speed and
   fit.largest_fitting). The measured quantity decides which estimate it is compared with:

     weights_*            the weight terms of the memory breakdown
     kv_tokens            vLLM KV budget / KV bytes per token; the budget is
                          gpu_memory_utilization x usable memory - every non-KV term
                          (the budget inference.max_concurrency divides)
     kv_blocks            KV budget / (bytes per token x block; 16 unless the conditions say)
     max_concurrency      KV budget / KV bytes of one sequence, unrounded as vLLM prints it
     activation_*         the activation terms of the serving breakdown
     cuda_graph_*         the CUDA-graphs term
     profile_peak_*       weights + activation terms (vLLM's profile run: no KV cache, no graphs)
     peak_allocated_*     peak - allocator reserve - freed-logits block - CUDA context - NCCL - vLLM engine reserve
     peak_reserved_*      peak - CUDA context - NCCL - vLLM engine reserve
     nvidia_smi_*         the whole peak - vLLM engine reserve (the share vLLM leaves unused)
     max_seq_len_tokens   largest seq_len that fits the GPU, rounded down to a multiple of 256
     speed                estimate_speed's metric: step_s / tokens_per_s / samples_per_s
                          (fine-tune), ttft_s / tpot_s / output_tokens_per_s (serving),
                          s_per_image (image), s_per_clip (video); s_per_it = a training step
                          or one denoiser step

   A job the spec cannot express (it does not parse, or its notes say "inexpressible: ...") is
   listed with the reason and left out of the medians. Any failure is listed, and the run goes on.
3. Error = estimate / measured − 1; per category: points, median |error|, worst error, the share
   in the unsafe direction and the share more than 5% on it, over the points marked certain; each
   also leave-one-source-out (published/loso.py: every constant a source set, found from the points'
   `informs` references, refitted without it), and over every memory point; the targets again on
   the points of the sources used in no constant (neither named by `informs` nor cited by gpuscout).
4. Runs the peers (accelerate, llm-analysis, hf-mem; published/peers.py) on the same points.
5. With --baseline-src DIR, also runs gpuscout from DIR/src in a subprocess ("before" column).
6. Writes the markdown atomically; --json writes every row; --write-margins writes the error bands
   (published/margins.py) to src/gpuscout/estimator/margins.toml, which `estimate` and `pick` judge
   fits with.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))  # the published/ helpers beside this script

from published import calibrate, loso, margins  # noqa: E402
from published.gpuscout_side import estimate_point  # noqa: E402
from published.peers import INSTALL, PEERS, available, run_peer  # noqa: E402
from published.points import CATEGORIES, Point, PointFormatError, load_points  # noqa: E402
from published.report import Row, markdown  # noqa: E402

__all__ = ["CATEGORIES", "check_gpus", "estimate_point", "load_points", "main"]  # what tests use

POINTS_DIR = ROOT / "validation" / "published"
DEFAULT_OUT = ROOT / "validation" / "published.md"
MARGINS_OUT = ROOT / "src" / "gpuscout" / "estimator" / "margins.toml"
SIDE_SCRIPT = HERE / "published" / "gpuscout_side.py"
PACKAGES = ("gpuscout", "torch", "transformers", "diffusers", "peft", "accelerate", "llm-analysis", "hf-mem")


def check_gpus(points: Sequence[Point]) -> list[PointFormatError]:
    """Each point's GPU must be a catalog SKU or alias (weights points may leave it empty)."""
    from gpuscout.hardware.catalog import lookup_gpu

    return [PointFormatError(p.file, p.id, f"gpu {p.gpu!r} is not in gpuscout's catalog (`gpuscout gpus`)")
            for p in points if p.gpu and lookup_gpu(p.gpu) is None]


def run_baseline(src: Path, points: Sequence[Point]) -> dict[str, dict[str, Any]]:
    """gpuscout_side.py under another source tree's gpuscout: one result per point id."""
    if not (src / "src" / "gpuscout").is_dir():
        raise SystemExit(f"--baseline-src {src}: no src/gpuscout there (give a checkout or a git worktree)")
    env = {**os.environ, "PYTHONPATH": str(src / "src")}
    done = subprocess.run([sys.executable, str(SIDE_SCRIPT)], input=json.dumps([p.to_wire() for p in points]),
                          capture_output=True, text=True, env=env, check=False, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"the baseline run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    answer = json.loads(done.stdout)
    used = Path(answer["gpuscout"]).resolve()
    if not used.is_relative_to((src / "src").resolve()):  # an installed gpuscout shadowed PYTHONPATH
        raise SystemExit(f"the baseline imported gpuscout from {used}, not from {src / 'src'}")
    return {r["id"]: r for r in answer["results"]}


def git_short(path: Path) -> str:
    done = subprocess.run(["git", "-C", str(path), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=False)
    return done.stdout.strip() or "unknown"


def versions() -> str:
    found = []
    for name in PACKAGES:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name} ✗")
    return ", ".join(found)


def estimate_rows(points: Sequence[Point], peers: Sequence[str]) -> list[Row]:
    rows = []
    for point in points:
        row = Row(point=point, after=estimate_point(point.to_wire()))
        if row.after["status"] != "inexpressible":  # a peer runs only on a job the spec can state
            row.peers = {peer: run_peer(peer, point.to_wire()) for peer in peers}
        rows.append(row)
    return rows


def write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def rows_json(rows: Sequence[Row]) -> list[dict[str, Any]]:
    return [{"id": r.point.id, "category": r.point.category, "gpu": r.point.gpu, "quantity": r.point.quantity,
             "measured": r.point.measured, "certain": r.point.certain, "counted": r.counted,
             "inexpressible": r.inexpressible, "gpuscout": r.after, "error": r.err(), "loso": r.loso,
             "loso_error": r.err("loso"), "source_key": loso.source_key(r.point.source), "before": r.before,
             "before_error": r.err("before"), "calibrated": r.calibrated,
             "peers": {k: {"value": v.value, "note": v.note, "failed": v.failed, "error": r.peer_err(k)}
                       for k, v in r.peers.items()}} for r in rows]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--points", type=Path, default=POINTS_DIR, help="folder of *.toml point files")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="markdown to write")
    parser.add_argument("--json", type=Path, default=None, help="also write every row as JSON here")
    parser.add_argument("--baseline-src", type=Path, default=None, help="another gpuscout source tree (before)")
    parser.add_argument("--baseline-label", default=None, help="what to call the baseline (default: its commit)")
    parser.add_argument("--no-peers", action="store_true", help="skip accelerate, llm-analysis and hf-mem")
    parser.add_argument("--write-margins", type=Path, nargs="?", const=MARGINS_OUT, default=None,
                        help=f"also write the error bands (default {MARGINS_OUT.relative_to(ROOT)})")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    points, errors = load_points(args.points)
    errors += check_gpus(points)
    bad = {(e.path, e.point_id) for e in errors}
    points = [p for p in points if (p.file, p.id) not in bad]
    for e in errors:
        print(f"format error: {e}", file=sys.stderr)
    peers = [] if args.no_peers else [p for p in PEERS if available(p)]
    peer_notes = {p: f"not installed ({INSTALL[p]})" for p in PEERS if p not in peers and not args.no_peers}
    for peer, note in peer_notes.items():
        print(f"{peer}: {note}", file=sys.stderr)
    rows = estimate_rows(points, peers)
    if args.baseline_src is not None:
        before = run_baseline(args.baseline_src, points)
        for row in rows:
            row.before = before.get(row.point.id)
    calibrated = calibrate.apply(rows)
    loso_result = loso.apply(rows)
    header = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "gpuscout commit": git_short(ROOT),
        "packages": versions(),
        "command": shlex.join(["python", "benchmarks/published_error.py",
                               *(argv if argv is not None else sys.argv[1:])]),
        "points": f"{len(points)} from {args.points.name}/ ({sum(r.counted for r in rows)} counted)",
    }
    if args.baseline_src is not None:
        header["before"] = args.baseline_label or f"gpuscout {git_short(args.baseline_src)}"
    text = markdown(rows, header, peers, peer_notes, args.baseline_src is not None, calibrated,
                    [str(e) for e in errors], loso_result)
    write_atomically(args.out, text)
    if args.write_margins is not None:
        derivation = margins.derivation_header(header["command"], header["date"], header["gpuscout commit"], rows)
        write_atomically(args.write_margins, margins.to_toml(margins.derive(rows), derivation))
        print(f"wrote {args.write_margins}")
    if args.json is not None:
        write_atomically(args.json, json.dumps(rows_json(rows), indent=1) + "\n")
    print(f"wrote {args.out} ({len(rows)} points, {sum(r.counted for r in rows)} counted)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
