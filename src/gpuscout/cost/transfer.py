"""Where the job's data lives, and what moving it to the offer's machine costs in time and money.

A dataset of `--dataset-gb` GB in `--dataset-region` (or at `--dataset-url`) is pulled to the rented
machine before the work starts: that time is billed like startup, and the source cloud bills its
egress (docs/cost.md §2.14):

    same cloud, same region            free, at the same-region bandwidth
    same cloud, other region           the source's inter-region price per GB
    other continent / region unknown   the source's internet egress price (an upper bound)
    other cloud, or a URL              the source's internet egress price

Prices are dated EXAMPLES (USD per GB), each with its source in docs/cost.md §2.14; a user who
knows the real price passes `--dataset-egress-per-gb`.
"""

from __future__ import annotations

import re
from datetime import date
from typing import Literal
from urllib.parse import urlsplit

from pydantic import ConfigDict, Field, ValidationError

from gpuscout.errors import SpecError
from gpuscout.frozen import Frozen
from gpuscout.hardware.offers import Offer
from gpuscout.redact import redact_url
from gpuscout.userfile import shown

GB = 10**9
GBIT = 10**9 / 8  # bytes per second in one gigabit per second

# Bandwidth of the pull (docs/cost.md §2.14). EC2 caps one flow at 5 Gbit/s outside a placement group
# and traffic to other regions or the internet at 5 Gbit/s below 32 vCPUs (AWS EC2 User Guide,
# "Amazon EC2 instance network bandwidth"); SkyPilot's optimizer assumes 10 Gbit/s between clouds.
# Conservative: the cap inside a region, a fifth of it across regions and the internet (long round
# trips and object-store streams rarely fill the cap). ASSUMPTION for the 1 Gbit/s.
SAME_REGION_GBPS = 5.0
REMOTE_GBPS = 1.0

Route = Literal["same region", "inter-region", "other continent", "internet", "free"]


class Egress(Frozen):
    """A cloud's example egress prices, USD per GB, as read on a date."""


    internet_usd_per_gb: float
    inter_region_usd_per_gb: float
    observed_at: date
    source: str


_READ = date(2026, 12, 1)
# EXAMPLE prices (docs/cost.md §2.14 gives the sources in full): the first-tier internet rate after any
# free allowance, and the inter-region rate within one continent.
EGRESS: dict[str, Egress] = {
    "aws": Egress(internet_usd_per_gb=0.09, inter_region_usd_per_gb=0.02, observed_at=_READ,
                  source="secondary: docs/cost.md §2.9; awsnegotiations.com, Cross-Region Transfer Minimization"),
    "gcp": Egress(internet_usd_per_gb=0.12, inter_region_usd_per_gb=0.02, observed_at=date(2026, 7, 30),
                  source="Cloud Billing Catalog via Cyclenerd/google-cloud-pricing-cost-calculator (premium tier)"),
    "azure": Egress(internet_usd_per_gb=0.087, inter_region_usd_per_gb=0.02, observed_at=_READ,
                    source="secondary: c3x.dev, Azure egress; lucidity.cloud, Azure storage egress"),
    # "No egress fees" / "no fees for data transfer" / "Egress ... Free" (docs/prices.md §3.4, §3.5, §3.8, §3.9).
    "lambda": Egress(internet_usd_per_gb=0.0, inter_region_usd_per_gb=0.0, observed_at=date(2026, 9, 20),
                     source="docs/prices.md §3.4"),
    "runpod": Egress(internet_usd_per_gb=0.0, inter_region_usd_per_gb=0.0, observed_at=date(2026, 11, 9),
                     source="docs/prices.md §3.5"),
    "coreweave": Egress(internet_usd_per_gb=0.0, inter_region_usd_per_gb=0.0, observed_at=_READ,
                        source="docs/prices.md §3.8"),
    "nebius": Egress(internet_usd_per_gb=0.0, inter_region_usd_per_gb=0.0, observed_at=_READ,
                     source="docs/prices.md §3.9"),
}
_ALIASES = {"amazon": "aws", "ec2": "aws", "s3": "aws", "google": "gcp", "googlecloud": "gcp", "gcs": "gcp",
            "microsoft": "azure", "lambdalabs": "lambda"}
# Unknown source (a URL on some other host): the dearest internet rate above, the same for every offer.
UNKNOWN_SOURCE_USD_PER_GB = max(e.internet_usd_per_gb for e in EGRESS.values())

_AWS_REGION = re.compile(r"^(us|eu|ap|sa|ca|me|af|il|mx)(-gov)?-[a-z]+-\d+$")
_GCP_REGION = re.compile(r"^[a-z]+-[a-z]+\d+$")
_AZURE_REGION = re.compile(r"^[a-z]+\d?$")
_S3_HOST = re.compile(r"(?:^|\.)s3[.-]([a-z0-9-]+)\.amazonaws\.com$")
_CONTINENT = {"us": "na", "ca": "na", "mx": "na", "northamerica": "na", "eu": "eu", "europe": "eu", "ap": "asia",
              "asia": "asia", "sa": "sa", "southamerica": "sa", "me": "me", "il": "me", "af": "af",
              "africa": "af", "australia": "oceania"}


class DataSource(Frozen):
    """Where the job's dataset lives and how big it is (what the user said; nothing is fetched)."""

    model_config = ConfigDict(allow_inf_nan=False)

    dataset_gb: float = Field(gt=0, le=10**7)  # 10 PB
    cloud: str | None = None  # aws, gcp, azure … (None: unknown)
    region: str | None = None
    url: str | None = None
    egress_usd_per_gb: float | None = Field(None, ge=0, le=100)  # the user's own price, overriding the table
    gbps: float | None = Field(None, gt=0, le=10_000)  # the user's own bandwidth

    @property
    def placed(self) -> bool:
        """Where it lives is known (a region or a URL); a size alone only counts on disk."""
        return self.url is not None or self.region is not None or self.cloud is not None

    @property
    def where(self) -> str:
        if self.url is not None:
            return f"{self.url} ({self.cloud or 'unknown host'})"
        return f"{self.cloud}:{self.region}" if self.region else str(self.cloud)


class Transfer(Frozen):
    """Moving the dataset to one offer's machine."""


    gb: float
    route: Route
    source: str  # where from, in words
    gbps: float
    seconds: float
    usd_per_gb: float
    egress_usd: float
    basis: str  # why this price and this bandwidth, for a footnote


def data_source(*, dataset_gb: float | None, region: str | None = None, url: str | None = None,
                egress_usd_per_gb: float | None = None, gbps: float | None = None) -> DataSource | None:
    """The user's flags as a `DataSource`, or None without a dataset; bad input is a SpecError."""
    if dataset_gb is None:
        if region is not None or url is not None:
            raise SpecError("--dataset-region or --dataset-url was given without --dataset-gb.",
                            "The transfer time and the egress cost follow from the dataset's size.",
                            "Add --dataset-gb SIZE (decimal GB), e.g. --dataset-gb 500.")
        return None
    if region is not None and url is not None:
        raise SpecError("Both --dataset-region and --dataset-url were given.",
                        "The dataset lives in one place; its region or its URL says where.",
                        "Pass one of them.")
    cloud, where = _url_place(url) if url is not None else _region_place(region) if region is not None \
        else (None, None)
    try:  # only the host places the data: the URL is kept, shown and stored without its credentials
        return DataSource(dataset_gb=dataset_gb, cloud=cloud, region=where, url=redact_url(url) if url else None,
                          egress_usd_per_gb=egress_usd_per_gb, gbps=gbps)
    except ValidationError as exc:
        first = exc.errors()[0]
        flag = {"dataset_gb": "--dataset-gb", "egress_usd_per_gb": "--dataset-egress-per-gb",
                "gbps": "--dataset-gbps"}.get(str(first["loc"][0]), str(first["loc"][0]))
        raise SpecError(f"{flag} {shown(first.get('input'))}: {first['msg']}.",
                        "A dataset size, an egress price and a bandwidth are positive, finite amounts.",
                        f"Pass {flag} with a number in range.") from None


def _region_place(text: str | None) -> tuple[str | None, str | None]:
    """'aws:us-east-1' → ('aws', 'us-east-1'); a bare region's cloud is read from its shape."""
    raw = (text or "").strip().lower()
    if ":" in raw:
        cloud, region = (part.strip() for part in raw.split(":", 1))
        return cloud_key(cloud), region or None
    for cloud, shape in (("aws", _AWS_REGION), ("gcp", _GCP_REGION), ("azure", _AZURE_REGION)):
        if shape.match(raw):
            return cloud, raw
    raise SpecError(f"--dataset-region {shown(text)}: cannot tell which cloud this region belongs to.",
                    "The egress price depends on the cloud the data leaves (AWS us-east-1, GCP us-central1, "
                    "Azure eastus have different shapes; others have none).",
                    "Write it as CLOUD:REGION, e.g. --dataset-region aws:us-east-1 or runpod:eu-ro-1.")


def _url_place(url: str | None) -> tuple[str | None, str | None]:
    """The cloud (and for S3, the region) a dataset URL points at; None where the host says nothing."""
    parts = urlsplit(url or "")
    host = (parts.hostname or "").lower()
    if parts.scheme not in ("http", "https", "s3", "gs", "az") or (not host and parts.scheme in ("http", "https")):
        raise SpecError(f"--dataset-url {shown(redact_url(url or ''))} is not a URL gpuscout can place.",
                        "It reads the host of an http(s) URL, or an s3://, gs:// or az:// bucket.",
                        "Pass e.g. https://bucket.s3.us-east-1.amazonaws.com/data or s3://bucket/data.")
    if parts.scheme == "s3" or host.endswith("amazonaws.com"):
        match = _S3_HOST.search(host)
        return "aws", match.group(1) if match else None
    if parts.scheme == "gs" or host.endswith("googleapis.com"):
        return "gcp", None
    if parts.scheme == "az" or host.endswith(".core.windows.net"):
        return "azure", None
    return None, None


def cloud_key(name: str) -> str:
    """A provider's name as a key of the egress table: 'Amazon Web Services' → 'aws', 'Lambda' → 'lambda'."""
    key = re.sub(r"[^a-z0-9]", "", name.lower())
    for alias, cloud in (*_ALIASES.items(), *((c, c) for c in EGRESS)):
        if key == alias or key.startswith(alias):
            return cloud
    return key


def continent(region: str) -> str | None:
    """'us-east-1' → 'na', 'europe-west4' → 'eu'; None when the prefix says nothing."""
    return _CONTINENT.get(region.lower().split("-", 1)[0])


def plan_transfer(data: DataSource, offer: Offer) -> Transfer:
    """The route from the data to `offer`'s machine, its price per GB, its bandwidth and its time."""
    route, price, why = _route(data, offer)
    if data.egress_usd_per_gb is not None:
        price, why = data.egress_usd_per_gb, f"{why}; price given with --dataset-egress-per-gb"
    default_gbps = SAME_REGION_GBPS if route == "same region" else REMOTE_GBPS
    gbps = data.gbps or default_gbps
    seconds = data.dataset_gb * GB / (gbps * GBIT)
    speed = "as given (--dataset-gbps)" if data.gbps else (
        "EC2's single-flow cap" if route == "same region" else "a fifth of EC2's 5 Gbit/s cap; ASSUMPTION")
    return Transfer(gb=data.dataset_gb, route=route, source=data.where, gbps=gbps, seconds=seconds,
                    usd_per_gb=price, egress_usd=data.dataset_gb * price,
                    basis=f"{why}; {data.dataset_gb:g} GB at {gbps:g} Gbit/s ({speed})")


def _route(data: DataSource, offer: Offer) -> tuple[Route, float, str]:
    table = EGRESS.get(data.cloud or "")
    if table is None:
        return "internet", UNKNOWN_SOURCE_USD_PER_GB, (
            f"source {data.cloud or 'unknown'}: no example price, priced at the dearest internet rate in the "
            f"example table (${UNKNOWN_SOURCE_USD_PER_GB:g}/GB), the same for every offer")
    if table.internet_usd_per_gb == 0 and table.inter_region_usd_per_gb == 0:
        return "free", 0.0, f"{data.cloud} charges no egress ({table.source})"
    internet = f"internet egress from {data.cloud} ${table.internet_usd_per_gb:g}/GB (EXAMPLE, {table.observed_at})"
    if cloud_key(offer.provider) != data.cloud:
        return "internet", table.internet_usd_per_gb, f"{offer.provider} is another cloud: {internet}"
    if not offer.region or not data.region:
        return "internet", table.internet_usd_per_gb, f"a region is not stated, so priced as {internet}"
    if offer.region.lower() == data.region.lower():
        return "same region", 0.0, f"same region ({offer.region}): no transfer charge"
    here, there = continent(offer.region), continent(data.region)
    if here is None or here != there:
        return "other continent", table.internet_usd_per_gb, (
            f"{data.region} → {offer.region} crosses continents (or says nothing of its continent): "
            f"priced as {internet}, an upper bound")
    return "inter-region", table.inter_region_usd_per_gb, (
        f"{data.region} → {offer.region}: {data.cloud} inter-region ${table.inter_region_usd_per_gb:g}/GB "
        f"(EXAMPLE, {table.observed_at})")
