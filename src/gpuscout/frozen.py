"""The one base of gpuscout's value models: immutable, and strict about the fields it accepts.

Every spec, estimate, measurement and report model is a value: built once, compared and stored,
never changed in place (frozen=True makes assignment an error and instances hashable). A key the
model does not know is a typo in a user's file or a writer from another version, so it is refused
rather than dropped (extra="forbid"). A model that also refuses inf and NaN adds
`model_config = ConfigDict(allow_inf_nan=False)`: pydantic merges it with this one.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    # Fields added to a model after its dumps were in use, with the value that means "not used": a dump
    # leaves them out at that value, so a value that uses none of them serializes byte for byte as before
    # they existed (stored results, estimate JSON, golden files). Reading such a dump back gives the value.
    quiet_defaults: ClassVar[dict[str, Any]] = {}

    @model_serializer(mode="wrap")
    def _leave_out_quiet_defaults(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if not self.quiet_defaults or not isinstance(data, dict):
            return data
        return {k: v for k, v in data.items() if k not in self.quiet_defaults or v != self.quiet_defaults[k]}
