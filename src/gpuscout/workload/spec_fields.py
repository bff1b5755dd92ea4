"""The job-spec reference, read from the job models themselves: every field's type, default, range and meaning.

`gpuscout spec` and docs/spec.md are rendered from `spec_tables`, so neither can drift from what a spec
accepts: the type and default come from the pydantic field, the range from its constraints (`gt`, `le`,
`max_length`), and the meaning from the field's `description=` or, where it has none, the comment
written beside or above it in workload/job.py. `nearest_field` serves the did-you-mean of an unknown kind (`spec KIND`).
"""

from __future__ import annotations

import difflib
import inspect
import io
import tokenize
import types
import typing
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal, get_args, get_origin

from annotated_types import Ge, Gt, Le, Lt, MaxLen, MinLen
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from gpuscout.workload.job import FinetuneJob, ImageJob, InferenceJob, VideoJob

KINDS: dict[str, type[BaseModel]] = {"finetune": FinetuneJob, "inference": InferenceJob, "image": ImageJob,
                                     "video": VideoJob}


@dataclass(frozen=True)
class FieldDoc:
    name: str
    type: str  # "int", "bool", "one of: a, b", "table [lora]", "array of tables [[co_served]]" …
    default: str  # as written in TOML; "required", or "unset" for an optional field left out
    range: str  # "> 0, ≤ 4096", "≤ 255 chars", or ""
    meaning: str


@dataclass(frozen=True)
class SpecTable:
    kind: str
    table: str  # "" for the top level, "lora", "slo", "co_served" (an array of tables)
    fields: tuple[FieldDoc, ...]

    @property
    def heading(self) -> str:
        if not self.table:
            return f'kind = "{self.kind}"'
        return f"[[{self.table}]]" if self.table == "co_served" else f"[{self.table}]"


def spec_tables(kind: str | None = None) -> tuple[SpecTable, ...]:
    """Every table of every kind (or of one kind), top level first, then its nested tables."""
    kinds = [kind] if kind is not None else list(KINDS)
    out: list[SpecTable] = []
    for k in kinds:
        model = KINDS[k]
        out.append(SpecTable(k, "", tuple(_fields(model))))
        for name, info in model.model_fields.items():
            nested = _nested_model(info.annotation)
            if nested is not None:
                out.append(SpecTable(k, name, tuple(_fields(nested))))
    return tuple(out)


def nearest_field(key: str, choices: tuple[str, ...]) -> str | None:
    """The accepted key a misspelt one most likely meant, if any is close."""
    found = difflib.get_close_matches(key, choices, n=1, cutoff=0.6)
    return found[0] if found else None


def _fields(model: type[BaseModel]) -> list[FieldDoc]:
    comments = _comments(model)
    return [FieldDoc(name=name, type=_type(info.annotation), default=_default(info), range=_range(info),
                     meaning=info.description or comments.get(name, ""))
            for name, info in model.model_fields.items()]


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    for arg in (annotation, *get_args(annotation)):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


def _type(annotation: Any) -> str:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        shown = [_type(a) for a in args if a is not type(None)]
        return " or ".join(shown)
    if origin is Literal:
        return "one of: " + ", ".join(f'"{a}"' if isinstance(a, str) else str(a) for a in args)
    if origin is tuple:
        inner = args[0] if args else Any
        nested = _nested_model(inner)
        return "array of tables" if nested is not None else f"list of {_type(inner)}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "table"
    if origin is typing.Annotated:
        return _type(args[0])
    names = {int: "int", float: "float", bool: "bool", str: "str"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _default(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    value = info.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    if isinstance(value, BaseModel):
        return "see its table"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, tuple):
        return "[]" if not value else "[" + ", ".join(map(str, value)) + "]"
    if isinstance(value, int) and abs(value) >= 100_000:
        return f"{value:_}"
    return str(value)


def _range(info: FieldInfo) -> str:
    parts = []
    for meta in _constraints(info):
        if isinstance(meta, Gt):
            parts.append(f"> {_number(meta.gt)}")
        elif isinstance(meta, Ge):
            parts.append(f">= {_number(meta.ge)}")
        elif isinstance(meta, Lt):
            parts.append(f"< {_number(meta.lt)}")
        elif isinstance(meta, Le):
            parts.append(f"<= {_number(meta.le)}")
        elif isinstance(meta, MaxLen):
            parts.append(f"at most {meta.max_length} {'items' if _is_list(info) else 'chars'}")
        elif isinstance(meta, MinLen) and meta.min_length > 1:
            parts.append(f"at least {meta.min_length} chars")
    return ", ".join(dict.fromkeys(parts))


def _constraints(info: FieldInfo) -> list[Any]:
    found = list(info.metadata)
    if _is_list(info):
        return found  # a list's own length; its items' limits are theirs
    for arg in get_args(info.annotation):  # Name = Annotated[str, Field(max_length=…)] inside a union
        found += [m for a in (arg, *get_args(arg)) for m in getattr(a, "__metadata__", ())
                  for m in (getattr(m, "metadata", None) or [m])]
    return found


def _is_list(info: FieldInfo) -> bool:
    return any(get_origin(a) is tuple for a in (info.annotation, *get_args(info.annotation)))


def _number(value: Any) -> str:
    if isinstance(value, int) and abs(value) >= 100_000:
        exponent = len(str(abs(value))) - 1
        return f"1e{exponent}" if value == 10**exponent else f"{value:_}"
    return str(value)


@cache
def _comments(model: type[BaseModel]) -> dict[str, str]:
    """Each field's comment in the source of the class that declares it: the comment lines right above
    the field, else the comment at the end of its line. Section rules (`# --- … ---`) are not meanings."""
    found: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)) or cls is BaseModel:
            continue
        try:
            source = inspect.getsource(cls)
        except (OSError, TypeError):
            continue
        found |= _class_comments(source, set(getattr(cls, "__annotations__", {})))
    return found


def _class_comments(source: str, names: set[str]) -> dict[str, str]:
    lines = source.splitlines()
    trailing: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT and lines[tok.start[0] - 1].strip() != tok.string.strip():
            trailing[tok.start[0]] = tok.string.lstrip("#").strip()
    found: dict[str, str] = {}
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        name = stripped.split(":", 1)[0].strip()
        if line.startswith("    ") and not line.startswith("     ") and name in names and ":" in stripped:
            above: list[str] = []
            k = number - 2
            while k >= 0 and lines[k].strip().startswith("#"):
                text = lines[k].strip().lstrip("#").strip()
                if text.startswith("---"):
                    break
                above.insert(0, text)
                k -= 1
            meaning = " ".join(above) or trailing.get(number, "")
            if meaning:
                found[name] = meaning
    return found
