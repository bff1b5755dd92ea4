"""Fairness: every fixed variable of the results must be equal before any winner is named.

The fixed variables (docs/measurement.md §1), the job as run, the library versions, the CUDA and
driver versions, region and billing type, and the parameters of every case all results finished
are diffed; any difference blocks a verdict unless the user says --allow-diff, and then the
report lists them. The machine itself (GPU, clocks, CPU) is what is being compared: it is
listed, never flagged. In a load test the machine under test is the server behind the URL, so the
URL's scheme, host and port are its identity (listed, like the GPU of a bench) while its route
(path and query), the model, the tokenizer, the workload and the client's settings stay fixed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from urllib.parse import urlsplit

from gpuscout.errors import GpuscoutError
from gpuscout.frozen import Frozen
from gpuscout.results.schema import BenchResult

ABSENT = "(absent)"

# Fingerprint fields that describe the machine under test: listed side by side, never flagged.
MACHINE_FIELDS = ("gpu_name", "gpu_sku", "gpu_count", "gpu_memory_bytes", "compute_capability",
                  "sm_clock_mhz", "memory_clock_mhz", "power_limit_w", "pcie_generation", "pcie_width", "mig_mode",
                  "ecc", "topology", "cpu_model", "cpu_cores", "ram_bytes", "python", "platform", "gpuscout_version")
# Software the numbers depend on, recorded with the machine but held equal like a fixed variable.
FIXED_SOFTWARE = ("cuda", "driver")


class UnfairComparisonError(GpuscoutError):
    """The results differ in a fixed variable, so no winner can be named."""


class Difference(Frozen):
    field: str  # "settings.seq_len", "libraries.torch", "precision" …
    values: tuple[str, ...]  # one per result, as written in the files; "(absent)" when missing


class Fairness(Frozen):
    fair: bool
    checked: int  # how many fields were compared
    differences: tuple[Difference, ...]  # fixed variables that differ: these block a verdict
    machine_differences: tuple[Difference, ...]  # what is being compared: listed, not flagged
    notes: tuple[str, ...]



def labels(n: int) -> list[str]:
    """A, B, C … for the results in the order given (A is the baseline)."""
    return [chr(ord("A") + i) if i < 26 else f"R{i + 1}" for i in range(n)]


def endpoint_parts(url: str) -> tuple[str, str]:
    """(the server: "scheme://host:port", the route: "/path?query") of a load test's URL.

    The default port is written out, so http://h/ and http://h:80/ are one server."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:  # a port outside 0-65535: keep the text as written
        port = None
    port = port or {"http": 80, "https": 443}.get(parts.scheme.lower())
    host = (parts.hostname or "").lower()
    host = f"[{host}]" if ":" in host else host  # an IPv6 literal keeps its brackets
    server = f"{parts.scheme.lower()}://{host}" + (f":{port}" if port else "")
    route = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return server, route


def machine_fields(result: BenchResult) -> dict[str, object]:
    """What is being compared, listed side by side and never flagged: the machine, and for a load
    test the server the requests went to."""
    out: dict[str, object] = {f: getattr(result.fingerprint, f) for f in MACHINE_FIELDS}
    url = result.job.get("url") if result.kind == "load" else None
    if isinstance(url, str):
        out = {"endpoint": endpoint_parts(url)[0]} | out
    return out


def fixed_fields(result: BenchResult) -> dict[str, object]:
    """Every value a fair comparison holds equal, flattened to dotted names."""
    fixed = result.fixed
    out: dict[str, object] = {k: v for k, v in fixed.model_dump().items()
                              if k not in ("kind", "model", "data", "data_hash", "settings")}
    # The dataset's identity is its hash when both sides have one; otherwise its name.
    out["data"] = fixed.data_hash if fixed.data_hash else fixed.data
    out |= {f"settings.{k}": v for k, v in fixed.settings.items()}
    out |= {f"libraries.{k}": v for k, v in result.fingerprint.libraries.items()}
    out |= {k: getattr(result.fingerprint, k) for k in FIXED_SOFTWARE}
    out |= {f"job.{k}": v for k, v in result.job.items() if k != "name"}
    url = out.pop("job.url", None) if result.kind == "load" else None
    if isinstance(url, str):  # the server is the candidate (machine_fields); the route stays fixed
        out["job.route"] = endpoint_parts(url)[1]
    elif url is not None:
        out["job.url"] = url
    return out


def case_fields(result: BenchResult, results: Sequence[BenchResult]) -> dict[str, object]:
    """Parameters of the cases every result ran successfully: the same case must be the same work
    (e.g. an attention kernel that fell back to another on one machine)."""
    ok = [{c.name for c in r.cases if c.failure is None} for r in results]
    shared = set.intersection(*ok)
    return {f"case {c.name}.{k}": v for c in result.cases if c.name in shared for k, v in c.params.items()}


def diff_fields(rows: Sequence[dict[str, object]]) -> tuple[Difference, ...]:
    keys = list(dict.fromkeys(k for row in rows for k in row))
    missing = object()
    out = []
    for key in keys:
        values = [row.get(key, missing) for row in rows]
        if any(v != values[0] for v in values[1:]):
            out.append(Difference(field=key, values=tuple(ABSENT if v is missing else show(v) for v in values)))
    return tuple(out)


def show(value: object) -> str:
    """A fixed variable's value in words; one not recorded reads '(not set)', not JSON's null."""
    if value is None:
        return "(not set)"
    return value if isinstance(value, str) else json.dumps(value)


def check_fairness(results: Sequence[BenchResult]) -> Fairness:
    rows = [fixed_fields(r) | case_fields(r, results) for r in results]
    differences = diff_fields(rows)
    machine_rows = [machine_fields(r) for r in results]
    notes = []
    if len({r.fingerprint.gpuscout_version for r in results}) > 1:
        notes.append("The results were written by different gpuscout versions; the harness may have changed.")
    notes += [f"{label} is incomplete (interrupted, or some cases did not run)."
              for label, r in zip(labels(len(results)), results, strict=True) if not r.complete]
    notes += [f"{label} ran a depth slice of {r.fixed.layers} layers; full-depth figures are extrapolated."
              for label, r in zip(labels(len(results)), results, strict=True) if r.fixed.layers]
    return Fairness(fair=not differences, checked=len(set().union(*rows)), differences=differences,
                    machine_differences=diff_fields(machine_rows), notes=tuple(notes))


def unfair_error(fairness: Fairness, names: Sequence[str]) -> UnfairComparisonError:
    heads = "/".join(names)
    listed = "; ".join(f"{d.field}: {' vs '.join(d.values)}" for d in fairness.differences)
    return UnfairComparisonError(
        f"The results differ in {len(fairness.differences)} fixed variable(s) ({heads}): {listed}.",
        "A winner is only meaningful when the same work was measured the same way on every machine "
        "(docs/measurement.md §1); these differences change the numbers as much as the GPU does.",
        "Re-run `gpuscout bench` with the same job spec, settings and library versions on every machine, "
        "or pass --allow-diff to compare anyway (the report then lists the differences).")


