"""The job-spec reference (`gpuscout spec`, docs/spec.md) read from the job models, held to what they accept.

Every field of every kind is listed with a type, a default and a meaning; each range it states is the
one validation enforces (a value just past it is refused, the bound itself accepted); docs/spec.md is
what the command generates; an unknown key names the nearest field of its own table.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from gpuscout.errors import SpecError
from gpuscout.report.spec import REGENERATE, spec_markdown, spec_text
from gpuscout.workload.job import parse_job
from gpuscout.workload.spec_fields import KINDS, FieldDoc, SpecTable, spec_tables

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "src" / "gpuscout" / "examples"
BASE = {"finetune": "tiny-finetune", "inference": "tiny-inference", "image": "tiny-image", "video": "tiny-video"}


def base_spec(kind: str) -> dict[str, Any]:
    data = tomllib.loads((EXAMPLES / f"{BASE[kind]}.toml").read_text())
    assert data["kind"] == kind
    return data


def test_every_field_of_every_kind_has_a_type_a_default_and_a_meaning() -> None:
    tables = spec_tables()
    assert [t.heading for t in tables if not t.table] == [f'kind = "{k}"' for k in KINDS]
    assert {t.heading for t in tables if t.table} == {"[lora]", "[slo]", "[[co_served]]"}
    for table in tables:
        model_fields = set(_model(table).model_fields)
        assert {f.name for f in table.fields} == model_fields  # nothing left out
        for f in table.fields:
            assert f.type and f.default and len(f.meaning) > 10, (table.heading, f)
    finetune = {f.name: f for f in tables[0].fields}
    assert finetune["micro_batch"].type == "int" and finetune["micro_batch"].default == "1"
    assert finetune["micro_batch"].range == "> 0, <= 65536"
    assert finetune["method"].type == 'one of: "full", "lora", "qlora"' and finetune["method"].default == '"lora"'
    assert finetune["model"].default == "required" and finetune["loss"].default == "unset"


def _model(table: SpecTable) -> Any:
    model: Any = KINDS[table.kind]
    if table.table:
        from gpuscout.workload.spec_fields import _nested_model

        model = _nested_model(model.model_fields[table.table].annotation)
    return model


def ranged_fields() -> list[tuple[str, str, FieldDoc]]:
    return [(t.kind, t.table, f) for t in spec_tables() if t.table != "co_served" for f in t.fields
            if f.type in ("int", "float", "int or unset", "float or unset") and re.search(r"[<>]", f.range)]


def with_value(kind: str, table: str, name: str, value: float) -> dict[str, Any]:
    data = base_spec(kind)
    if table:
        data[table] = {**data.get(table, {}), name: value}
    else:
        data[name] = value
    return data


@pytest.mark.parametrize("kind,table,field", ranged_fields(), ids=lambda v: getattr(v, "name", v))
def test_each_stated_range_is_the_one_validation_enforces(kind: str, table: str, field: FieldDoc) -> None:
    """`> 0, <= 4096`: 0 and 4097 are refused, naming the field; the bounds' insides are not refused for range."""
    for op, bound_text in re.findall(r"(>=|<=|>|<) (\S+?)(?:,|$)", field.range):
        bound = float(bound_text)
        step = 1 if field.type.startswith("int") else max(abs(bound) * 1e-3, 1e-6)
        outside = {">": bound, ">=": bound - step, "<": bound, "<=": bound + step}[op]
        value: float = int(outside) if field.type.startswith("int") else outside
        with pytest.raises(SpecError) as err:
            parse_job(with_value(kind, table, field.name, value))
        assert field.name in str(err.value)
        inside = {">": bound + step, ">=": bound, "<": bound - step, "<=": bound}[op]
        try:
            parse_job(with_value(kind, table, field.name, int(inside) if field.type.startswith("int") else inside))
        except SpecError as exc:  # another rule may refuse the value (gpus a multiple of tensor_parallel) …
            assert not re.search(rf"\b{field.name}\b: Input should be (greater|less)", str(exc))  # … not its range


def test_docs_spec_md_is_what_the_command_generates() -> None:
    expected = spec_markdown(spec_tables())
    actual = (ROOT / "docs" / "spec.md").read_text(encoding="utf-8")
    assert actual == expected, f"docs/spec.md is stale: regenerate it with `{REGENERATE}` (PYTHONPATH=src)"


def test_the_reference_reads_at_80_columns() -> None:
    text = spec_text(spec_tables())
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "rank  int · default 16 · > 0, <= 4096" in text


@pytest.mark.parametrize("spec,words", [
    (lambda: with_value("finetune", "lora", "lora_rnak", 8),
     "unknown field 'lora_rnak' in [lora]: did you mean 'rank'?"),
    (lambda: with_value("finetune", "", "seq_lne", 4096), "unknown field 'seq_lne' in a finetune spec: did you mean "
                                                          "'seq_len'?"),
    (lambda: with_value("inference", "slo", "ttft_p59_s", 1.0), "in [slo]: did you mean 'ttft_p95_s'?"),
    (lambda: with_value("image", "", "zzzz", 1), "unknown field 'zzzz' in a image spec (check its spelling"),
])
def test_an_unknown_key_names_the_nearest_field_of_its_table(spec: Any, words: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_job(spec())
    assert words in str(err.value)


def gpuscout(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuscout", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "80"})


def test_the_spec_command() -> None:
    one = gpuscout("spec", "finetune")
    assert one.returncode == 0, one.stderr
    assert one.stdout.startswith('kind = "finetune"') and "[lora]" in one.stdout and "[slo]" not in one.stdout
    assert max(len(line) for line in one.stdout.splitlines()) <= 80
    unknown = gpuscout("spec", "finetuen")
    assert unknown.returncode == 1 and "Did you mean 'finetune'?" in unknown.stderr
    assert "Traceback" not in unknown.stderr
