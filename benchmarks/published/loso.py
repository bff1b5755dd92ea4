"""Leave-one-source-out: each source's points predicted with the constants fitted without that source.

Some of gpuscout's constants were set by looking at published measurements that are also validation
points. Their in-sample error says little about the next job, so this module refits every such
constant by one stated rule on every *other* source's counted points and re-estimates the left-out
source's points with the refitted values.

Which constants: found from the data, not from a list kept here. A point's `informs` field names
the constants set from it; each entry starts with a reference this module can resolve to a live
value, then any prose:

  overhead.CONV_WORKSPACE_INPUTS (...)                    a module-level constant
  speed.image.CUDA_CORE_GEMM_EFFICIENCY                   (modules under gpuscout.estimator or gpuscout)
  efficiency._table()['default']['image']['compute'] ...  a value inside a cached data table

A reference that does not resolve is reported as "not refittable" and the points of its source
that respond to it get no LOSO figure (never a silent in-sample one). A source is also "used in a
constant" when gpuscout's own code or data cites it (a constant's source comment, a data row's
`source`), whether or not a point names the constant: `cited_sources` finds those citations, and
the report's "sources used in no constant" subset leaves all of them out.

Which points a constant is fitted on: the counted points (of other sources) whose estimate moves
when the constant moves (`responds`: the estimate at twice the committed value, or at 1 where it is
0, differs). A point's LOSO refits only the constants its source informed *and* the point responds
to; the others keep their committed values (set without ever seeing the source, they already are a
fit without it).

Rule: the grid value with the least sum of |estimate ÷ measured − 1| over those points (least
absolute relative error, a median-type fit that one wild point cannot drag). The grid is
0 … 4 × the committed value in steps of 0.05 × it, which spans every constant's plausible range
without knowing its unit; several constants are fitted together by coordinate descent starting from
the middle of each grid (not from the committed values: those were set with every source, the
held-out one too, and a coordinate descent can settle near where it starts). Where no responding
point of another source is left, there is nothing to fit and the points keep no LOSO figure.

The committed constants were set by hand, not by this rule, so the report also prints what the
rule gives on every source: how far the hand-set value is from the rule's own fit.
"""

from __future__ import annotations

import functools
import importlib
import re
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from published.gpuscout_side import estimate_point

GIB = 2**30
GRID_STEPS = 80  # 0 … 4 × committed in steps of 0.05 × committed
GRID_SPAN = 4.0
SWEEPS = 3
PACKAGES = ("gpuscout.estimator", "gpuscout")  # where a reference's module is looked up, in this order
_STEP = re.compile(r"\.(\w+)|\(\)|\[\s*(?:'([^']*)'|\"([^\"]*)\"|(-?\d+))\s*\]")


class UnresolvedConstant(LookupError):
    """An `informs` reference that names no live gpuscout value."""


def source_key(source: str) -> str:
    """One source per repository file or per issue/PR thread; the commit and comment do not split it."""
    url = re.search(r"https?://github\.com/([^/\s]+)/([^/\s]+)/(?:issues|pull)/(\d+)", source)
    if url:
        return f"{url.group(1)}/{url.group(2)}#{url.group(3)}"
    repo_file = re.match(r"([\w.-]+/[\w.-]+):([^@\s]+)", source)
    if repo_file:
        return f"{repo_file.group(1)}:{repo_file.group(2)}"
    return source.split()[0] if source.split() else source


def reference(note: str) -> str:
    """The constant reference an `informs` entry starts with (the rest is prose)."""
    text = note.strip()
    depth, end = 0, len(text)
    for at, char in enumerate(text):  # the first blank outside brackets ends the reference
        if char in "[(":
            depth += 1
        elif char in "])":
            depth -= 1
        elif char.isspace() and depth == 0:
            end = at
            break
    return text[:end]


@dataclass(frozen=True)
class Constant:
    """A live gpuscout value named by a reference: a module attribute, or an item reached from one."""

    ref: str
    module: str  # the module the reference starts in
    steps: tuple[tuple[str, Any], ...]  # ("attr", name) / ("call", None) / ("item", key)

    @property
    def label(self) -> str:
        return self.ref

    def _parent(self) -> Any:
        target: Any = importlib.import_module(self.module)
        for kind, arg in self.steps[:-1]:
            target = getattr(target, arg) if kind == "attr" else target() if kind == "call" else target[arg]
        return target

    def get(self) -> Any:
        kind, arg = self.steps[-1]
        parent = self._parent()
        return getattr(parent, arg) if kind == "attr" else parent[arg]

    def set(self, value: Any) -> None:
        kind, arg = self.steps[-1]
        parent = self._parent()
        if kind == "attr":
            original = getattr(parent, arg)
            setattr(parent, arg, value)
            if len(self.steps) == 1:  # a constant imported by name elsewhere (`from x import NAME`) too
                for name, module in list(sys.modules.items()):
                    if name.startswith("gpuscout") and module is not parent \
                            and getattr(module, arg, None) is original and not isinstance(original, bool):
                        setattr(module, arg, value)
        else:
            parent[arg] = value

    def grid(self, committed: float) -> tuple[float, ...]:
        scale = committed if committed else 1.0
        return tuple(round(scale * GRID_SPAN * i / GRID_STEPS, 12) for i in range(GRID_STEPS + 1))

    def shown(self, value: float) -> str:
        if self.ref.upper().endswith("BYTES") and abs(value) >= 2**20:
            return f"{value / GIB:.2f} GiB"
        if self.ref.upper().endswith("BYTES_PER_S"):
            return f"{value / 1e9:.2f} GB/s"
        return f"{value:.4g}"


@functools.cache
def resolve(ref: str) -> Constant:
    """The live value `ref` names; `UnresolvedConstant` says why not."""
    head = re.match(r"[A-Za-z_][\w.]*", ref)
    if head is None:
        raise UnresolvedConstant(f"{ref!r} does not start with a dotted name")
    parts = head.group(0).split(".")
    for cut in range(len(parts) - 1, 0, -1):
        for package in PACKAGES:
            module = f"{package}.{'.'.join(parts[:cut])}"
            try:
                importlib.import_module(module)
            except ImportError:
                continue
            steps: list[tuple[str, Any]] = [("attr", name) for name in parts[cut:]]
            rest = ref[head.end():]
            while rest:
                found = _STEP.match(rest)
                if found is None:
                    raise UnresolvedConstant(f"{ref!r}: cannot read {rest!r}")
                attr, single, double, number = found.groups()
                if found.group(0) == "()":
                    steps.append(("call", None))
                elif attr is not None:
                    steps.append(("attr", attr))
                else:
                    steps.append(("item", int(number) if number is not None else single if single is not None
                                  else double))
                rest = rest[found.end():]
            if steps[-1][0] == "call":
                raise UnresolvedConstant(f"{ref!r} ends in a call, not a value")
            constant = Constant(ref, module, tuple(steps))
            try:
                value = constant.get()
            except (AttributeError, KeyError, IndexError, TypeError) as exc:
                raise UnresolvedConstant(f"{ref!r}: {type(exc).__name__}: {exc}") from None
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise UnresolvedConstant(f"{ref!r} is {type(value).__name__}, not a number")
            return constant
    raise UnresolvedConstant(f"{ref!r}: no module {parts[0]!r} under {' or '.join(PACKAGES)}")


@contextmanager
def patched(values: dict[Constant, float]) -> Iterator[None]:
    """The constants set to `values` for the duration (gpuscout reads them at call time)."""
    saved: dict[Constant, Any] = {}
    try:
        for constant, value in values.items():
            saved[constant] = constant.get()
            constant.set(type(saved[constant])(value))
        yield
    finally:
        for constant, value in saved.items():
            constant.set(value)


def _estimate(row: Any, values: dict[Constant, float]) -> float | None:
    with patched(values):
        result = estimate_point(row.point.to_wire())
    return float(result["value"]) if result["status"] == "ok" else None


def _loss(rows: Sequence[Any], values: dict[Constant, float]) -> float:
    total = 0.0
    for row in rows:
        value = _estimate(row, values)
        if value is None:
            return float("inf")
        total += abs(value / row.point.measured - 1.0)
    return total


def fit(rows: Sequence[Any], constants: Sequence[Constant], committed: dict[Constant, float]) -> dict[Constant, float]:
    """The constants fitted on `rows` by the rule above (coordinate descent from the grids' middles)."""
    values = {c: c.grid(committed[c])[GRID_STEPS // 2] for c in constants}
    for _ in range(SWEEPS):
        before = dict(values)
        for constant in constants:
            grid = constant.grid(committed[constant])
            values[constant] = min(grid, key=lambda v, c=constant: (_loss(rows, {**values, c: v}), v))
        if values == before:
            break
    return values


# ------------------------------------------------------------------------ citations ---------------

def _needles(key: str) -> list[str]:
    """Ways gpuscout's code or data may cite a source key ('owner/repo#12', 'owner/repo:path')."""
    thread = re.match(r"([^/]+)/([^#]+)#(\d+)$", key)
    if thread:
        owner, repo, number = thread.groups()
        return [f"{owner}/{repo}/issues/{number}", f"{owner}/{repo}/pull/{number}", f"{repo}#{number}",
                f"{repo} PR #{number}", f"{repo} issue #{number}", f"{repo} pull request #{number}"]
    repo_file = re.match(r"([^/]+)/([^:]+):(.+)$", key)
    if repo_file:
        owner, repo, path = repo_file.groups()
        name = path.rsplit("/", 1)[-1]
        generic = name.lower() in ("readme.md", "index.md", "docs.md")
        # A distinctive file name is cited on its own; a README only with its repository beside it.
        return [f"{repo}/{path}", f"{repo}:{path}", f"{repo} {path}"] + ([] if generic else [name])
    return [key] if len(key) > 12 else []


@functools.cache
def _source_texts(root: str) -> tuple[tuple[str, str], ...]:
    """(file, text) of gpuscout's Python and bundled data files under `root` (comments and data)."""
    found = []
    for path in sorted(Path(root).rglob("*")):
        if path.suffix in (".py", ".toml", ".json") and path.is_file() and path.name != "margins.toml":
            try:
                found.append((str(path), path.read_text(encoding="utf-8")))
            except (OSError, UnicodeDecodeError):
                continue
    return tuple(found)


def cited_sources(keys: Sequence[str]) -> dict[str, list[str]]:
    """For each source key that gpuscout's code or data cites, the files that cite it.

    margins.toml is left out: it is derived from every point by this benchmark, not a constant set
    from a source."""
    import gpuscout

    root = str(Path(gpuscout.__file__).resolve().parent)
    cited: dict[str, list[str]] = {}
    for key in keys:
        needles = _needles(key)
        files = [name for name, text in _source_texts(root) if any(n in text for n in needles)]
        if files:
            cited[key] = [str(Path(f).relative_to(Path(root).parent)) for f in files]
    return cited


# ------------------------------------------------------------------------ the run ----------------

@dataclass
class Loso:
    """What leave-one-source-out gave."""

    constants: list[Constant] = field(default_factory=list)
    committed: dict[Constant, float] = field(default_factory=dict)
    informed_by: dict[Constant, list[str]] = field(default_factory=dict)  # constant -> sources that set it
    fitted_on: dict[Constant, int] = field(default_factory=dict)  # counted responding points, all sources
    every: dict[Constant, float | None] = field(default_factory=dict)  # the rule's fit on every source
    without: dict[Constant, dict[str, float | None]] = field(default_factory=dict)  # ... without one source
    joint: dict[str, dict[Constant, float]] = field(default_factory=dict)  # 'source | refs' -> joint fit
    unresolved: dict[str, str] = field(default_factory=dict)  # reference -> why it does not resolve
    unresolved_sources: dict[str, list[str]] = field(default_factory=dict)  # reference -> sources naming it
    cited: dict[str, list[str]] = field(default_factory=dict)  # source -> gpuscout files citing it
    sources: dict[str, int] = field(default_factory=dict)  # source -> counted points

    def used_sources(self) -> set[str]:
        """Sources a constant was set from: named by an `informs` field or cited by gpuscout's code/data."""
        named = {s for srcs in self.informed_by.values() for s in srcs}
        named |= {s for srcs in self.unresolved_sources.values() for s in srcs}
        return named | set(self.cited)


def apply(rows: Sequence[Any]) -> Loso:
    """Fill `row.loso` (the estimate under constants fitted without the row's source) for every row."""
    result = Loso()
    informs: dict[str, set[str]] = {}  # source -> references its points name
    for row in rows:
        key = source_key(row.point.source)
        result.sources[key] = result.sources.get(key, 0) + int(row.counted)
        for note in row.point.extra.get("informs", []):
            informs.setdefault(key, set()).add(reference(note))
    by_source: dict[str, list[Constant]] = {}
    for key, refs in sorted(informs.items()):
        for ref in sorted(refs):
            try:
                constant = resolve(ref)
            except UnresolvedConstant as exc:
                result.unresolved[ref] = str(exc)
                result.unresolved_sources.setdefault(ref, []).append(key)
                continue
            by_source.setdefault(key, []).append(constant)
            result.informed_by.setdefault(constant, []).append(key)
    result.constants = sorted(result.informed_by, key=lambda c: c.ref)
    result.committed = {c: float(c.get()) for c in result.constants}
    result.cited = cited_sources(sorted(result.sources))

    ok = [r for r in rows if r.after["status"] == "ok"]
    responds: dict[Constant, set[str]] = {}
    for constant in result.constants:
        moved = result.committed[constant] * 2 or 1.0
        responds[constant] = {r.point.id for r in ok if _estimate(r, {constant: moved}) != r.after["value"]}
    counted = [r for r in ok if r.counted]
    for constant in result.constants:
        points = [r for r in counted if r.point.id in responds[constant]]
        result.fitted_on[constant] = len(points)
        result.every[constant] = fit(points, [constant], result.committed)[constant] if points else None

    unresolved_by_source = {s for srcs in result.unresolved_sources.values() for s in srcs}
    for row in rows:
        if row.after["status"] != "ok":
            continue
        key = source_key(row.point.source)
        mine = [c for c in by_source.get(key, []) if row.point.id in responds[c]]
        if key in unresolved_by_source:
            refs = [ref for ref, srcs in result.unresolved_sources.items() if key in srcs]
            row.loso_note = f"its source set {', '.join(refs)}, which this benchmark cannot refit"
            row.loso = None
            continue
        if not mine:
            row.loso = row.after["value"]  # nothing it responds to was set from its source
            continue
        others = [r for r in counted if source_key(r.point.source) != key]
        values: dict[Constant, float] = {}
        missing = []
        for constant in mine:
            if key not in result.without.setdefault(constant, {}):
                points = [r for r in others if r.point.id in responds[constant]]
                result.without[constant][key] = (fit(points, [constant], result.committed)[constant]
                                                 if points else None)
            found = result.without[constant][key]
            if found is None:
                missing.append(constant.ref)
            else:
                values[constant] = found
        if missing:
            row.loso_note = f"nothing left to fit {', '.join(missing)} on"
            row.loso = None
            continue
        if len(values) > 1:  # several constants the point responds to: fit them together
            together = sorted(values, key=lambda c: c.ref)
            joint_key = f"{key} | " + " + ".join(c.ref for c in together)
            if joint_key not in result.joint:
                points = [r for r in others if any(r.point.id in responds[c] for c in together)]
                result.joint[joint_key] = fit(points, together, result.committed)
            values = dict(result.joint[joint_key])
        row.loso = _estimate(row, values)
    return result
