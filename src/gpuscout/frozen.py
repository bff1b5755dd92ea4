"""The one base of gpuscout's value models: immutable, and strict about the fields it accepts.

Every spec, estimate, measurement and report model is a value: built once, compared and stored,
never changed in place (frozen=True makes assignment an error and instances hashable). A key the
model does not know is a typo in a user's file or a writer from another version, so it is refused
rather than dropped (extra="forbid"). A model that also refuses inf and NaN adds
`model_config = ConfigDict(allow_inf_nan=False)`: pydantic merges it with this one.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
