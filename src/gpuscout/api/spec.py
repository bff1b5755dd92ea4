"""`spec`: the job-spec reference, every field of every kind (or of one) with type, default, range, meaning."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpuscout.workload.spec_fields import SpecTable


def job_spec(kind: str | None = None) -> tuple[SpecTable, ...]:
    """The tables of a job spec, read from the job models: top level first, then the nested tables."""
    from gpuscout.api.inputs import InputError
    from gpuscout.workload.spec_fields import KINDS, nearest_field, spec_tables

    if kind is not None and kind not in KINDS:
        near = nearest_field(kind, tuple(KINDS))
        raise InputError(f"No job kind {kind!r}.", "A job spec is one of four kinds: " + ", ".join(KINDS) + ".",
                         (f"Did you mean {near!r}? " if near else "") + "Pass one of them, or none for all.")
    return spec_tables(kind)
