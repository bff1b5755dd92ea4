"""A Spot Advisor–style file: the monthly interruption-frequency band of instance types per region.

AWS's Spot Instance Advisor (aws.amazon.com/ec2/spot/instance-advisor/) puts each instance type in
each region into one of five bands of "frequency of interruption", the rate at which Spot reclaimed
capacity over the trailing month: <5%, 5-10%, 10-15%, 15-20% and >20%. gpuscout never fetches it:
the user copies the rows they need into a small TOML file (docs/cost.md §2.11, "A Spot Advisor
file"), and spot offers the price sheet gives no interruption rate for are priced from the band of
their instance type (`product`) and `region`. How a monthly share becomes a rate per hour is
`cost.spot_prior`'s business; this module only reads and validates.

    observed_at = 2026-11-30           # required: the day the advisor was read
    source = "aws.amazon.com/ec2/spot/instance-advisor/ (Linux)"   # required
    exposure_hours = 24                # optional: hours of running the share is read over (1 to 744)

    [[band]]
    instance_type = "p4d.24xlarge"
    region = "us-east-1"
    frequency = ">20%"                 # "<5%", "5-10%", "10-15%", "15-20%" or ">20%"
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import date
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field, ValidationError, field_validator

from gpuscout.errors import SpecError
from gpuscout.frozen import Frozen
from gpuscout.hardware.offers import Offer
from gpuscout.userfile import printable, read_user_toml, shown

# The advisor's five bands as (low, high) monthly shares; ">20%" has no upper bound (None).
FREQUENCY_BANDS: Mapping[str, tuple[float, float | None]] = {
    "<5%": (0.0, 0.05), "5-10%": (0.05, 0.10), "10-15%": (0.10, 0.15), "15-20%": (0.15, 0.20), ">20%": (0.20, None),
}  # fmt: skip
# The advisor counts a share of instances reclaimed over its trailing month, not per hour of running, and
# AWS does not say how long those instances ran. Read over a whole month (730 h) the share gives the
# lowest rate it allows; read over one day of running it gives a rate 30x higher. gpuscout takes the day:
# where unsure it errs on the side that prices the risk rather than hiding it (docs/cost.md §2.11).
DEFAULT_EXPOSURE_HOURS = 24.0
MAX_ADVISOR_BYTES = 4 * 2**20  # every type in every region is a few thousand rows: ~200 KB
_FIX = ("Write the file as docs/cost.md §2.11 shows: observed_at, source, then one [[band]] per instance type "
        "and region with instance_type, region and frequency.")


def frequency_label(text: str) -> str:
    """'5–10 %', ' 5-10%' → '5-10%'; an unknown label is a ValueError that lists the five."""
    label = re.sub(r"\s+", "", text).replace("–", "-").replace("—", "-")
    if label not in FREQUENCY_BANDS:
        raise ValueError(f"unknown frequency band {shown(text, 40)}; the advisor's bands are "
                         + ", ".join(f'"{b}"' for b in FREQUENCY_BANDS))
    return label


class AdvisorBand(Frozen):
    """One row of the advisor: an instance type in a region and its monthly interruption band."""

    instance_type: str = Field(min_length=1, max_length=255)
    region: str = Field(min_length=1, max_length=255)
    frequency: str

    @field_validator("frequency")
    @classmethod
    def _known_band(cls, value: str) -> str:
        return frequency_label(value)

    def matches(self, offer: Offer) -> bool:
        """The offer's instance type and region: `region` may be the region or one of its zones."""
        if offer.product.strip().lower() != self.instance_type.strip().lower():
            return False
        region, here = self.region.strip().lower(), offer.region.strip().lower()
        zone = here.removeprefix(region)
        return here == region or (here.startswith(region) and len(zone) == 1 and zone.isalpha())


class SpotAdvisor(Frozen):
    """A user's Spot Advisor file: its bands, when and where they were read, and the exposure assumed."""

    model_config = ConfigDict(allow_inf_nan=False)

    path: str
    observed_at: date
    source: str = Field(min_length=1)
    # Hours an instance of these types runs within the advisor's month: the share of instances
    # reclaimed in a month is read as a constant hazard over this many hours (docs/cost.md §2.11).
    exposure_hours: float = Field(DEFAULT_EXPOSURE_HOURS, ge=1.0, le=744.0)
    bands: tuple[AdvisorBand, ...]

    def band_for(self, offer: Offer) -> AdvisorBand | None:
        return next((b for b in self.bands if b.matches(offer)), None)


def load_spot_advisor(path: Path) -> SpotAdvisor:
    """Read and validate a Spot Advisor file; every problem is a SpecError that says where."""
    document = read_user_toml(path, "Spot Advisor file", "Check the path of the Spot Advisor file "
                              "(--spot-advisor); its format is in docs/cost.md §2.11.", max_bytes=MAX_ADVISOR_BYTES)
    return parse_spot_advisor(document, path=str(path))


def parse_spot_advisor(document: Mapping[str, Any], *, path: str = "Spot Advisor file") -> SpotAdvisor:
    unknown = [key for key in document if key not in ("observed_at", "source", "exposure_hours", "band")]
    if unknown:
        raise SpecError(f"{path} has unknown top-level keys: {printable(', '.join(map(str, unknown)))}.",
                        "A Spot Advisor file holds observed_at, source, exposure_hours and [[band]] tables.", _FIX)
    bands = document.get("band", [])
    if not isinstance(bands, list) or not bands or not all(isinstance(b, Mapping) for b in bands):
        raise SpecError(f"{path} has no [[band]] tables.",
                        "Each [[band]] gives one instance type's interruption band in one region.", _FIX)
    try:
        fields = {key: value for key, value in document.items() if key != "band"}
        advisor = SpotAdvisor.model_validate(fields | {"path": path, "bands": bands})
    except ValidationError as exc:
        raise SpecError(f"{path} is not a valid Spot Advisor file.", _problems(exc.errors()), _fix(exc)) from None
    _check_unique(advisor.bands, path)
    return advisor


def _problems(errors: Sequence[Any]) -> str:
    out = []
    for err in errors[:6]:
        loc = [str(p) for p in err["loc"]]
        where = (f"band #{int(loc[1]) + 1}." + ".".join(loc[2:]) if loc[:1] == ["bands"] and len(loc) > 1
                 else ".".join(loc) or "(whole file)")
        got = f" (got {shown(err['input'], 40)})" if "input" in err and not isinstance(err["input"], dict | list) \
            else ""
        message = str(err["msg"]).removeprefix("Value error, ")
        out.append(f"{printable(where, 60)}: {printable(message, 200)}{got}")
    return "; ".join(out) + (f"; and {len(errors) - 6} more" if len(errors) > 6 else "")


def _fix(exc: ValidationError) -> str:
    if any(str(e["loc"][-1]) == "frequency" for e in exc.errors() if e["loc"]):
        return 'Copy the band as the advisor shows it: "<5%", "5-10%", "10-15%", "15-20%" or ">20%".'
    if any(e["type"] == "missing" and e["loc"] in (("observed_at",), ("source",)) for e in exc.errors()):
        return ('Bands move month to month: add observed_at = YYYY-MM-DD (the day you read the advisor) and '
                'source = "where you read it".')
    return _FIX


def _check_unique(bands: Sequence[AdvisorBand], path: str) -> None:
    seen: dict[tuple[str, str], str] = {}
    for band in bands:
        key = (band.instance_type.strip().lower(), band.region.strip().lower())
        if key in seen and seen[key] != band.frequency:
            raise SpecError(f"{path}: {shown(band.instance_type, 60)} in {shown(band.region, 60)} has two bands, "
                            f"{seen[key]} and {band.frequency}.",
                            "One instance type in one region has one interruption band a month.",
                            "Keep the row of the month you mean and delete the other.")
        seen[key] = band.frequency
