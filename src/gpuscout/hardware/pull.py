"""What a pull of today's offers produced, whichever catalog it came from, and the sheet it is written as.

A pull reads one catalog source (gpuhunt, or SkyPilot's cached `vms.csv` files) provider by provider:
a provider whose fetch fails is named with its error and the others are kept; rows whose GPU gpuscout's
catalog does not know are skipped and counted by name. The offers carry each provider's billing rules
from `billing_rules.toml` and are written as an ordinary price sheet (`sheet_toml`), which `pick
--offers` reads: `pick` itself never fetches.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import date, datetime
from pathlib import Path

from pydantic import Field

from gpuscout.errors import SpecError
from gpuscout.frozen import Frozen
from gpuscout.hardware.billing_rules import UNKNOWN_RULES_NOTE, RulesTable, billing_rules
from gpuscout.hardware.catalog import find_gpu
from gpuscout.hardware.offers import Offer
from gpuscout.hardware.sheet_toml import sheet_toml

SOURCES = ("gpuhunt", "skypilot")
SKYPILOT_SCHEMA = "v8"  # SkyPilot's catalog schema folder under ~/.sky/catalogs (0.14 reads v8)


class ProviderPull(Frozen):
    """One provider's part of a pull: what it gave, or why it gave nothing."""

    provider: str
    offers: int = 0
    version: str = ""  # the catalog version the source names (gpuhunt's catalog version, SkyPilot's schema)
    error: str | None = None  # the fetch failed: this is why; the other providers are kept


class Pull(Frozen):
    """Every offer a pull produced, per provider, and the rows it skipped."""

    source: str
    fetched_at: datetime
    offers: tuple[Offer, ...]
    providers: tuple[ProviderPull, ...]
    unknown_gpus: dict[str, int] = Field(default_factory=dict)  # GPU names the catalog lacks: rows skipped, per name
    skipped: dict[str, int] = Field(default_factory=dict)  # other rows skipped, per reason
    notes: tuple[str, ...] = ()

    @property
    def failed(self) -> tuple[ProviderPull, ...]:
        return tuple(p for p in self.providers if p.error is not None)


def wanted_gpu_skus(gpus: Sequence[str]) -> frozenset[str]:
    """The catalog SKUs of the --gpu names (an unknown name is a user error that lists the catalog's)."""
    return frozenset(find_gpu(name).sku for name in gpus)


def kept(offers: Iterable[Offer], skus: frozenset[str], spot: bool | None) -> list[Offer]:
    """The offers of the wanted GPUs (all when none named) and tier (spot only, on-demand only, or both)."""
    return [o for o in offers
            if (not skus or o.gpu in skus) and (spot is None or (o.tier == "spot") == spot)]


def billing_notes(provider: str, table: RulesTable, currency: str) -> tuple[dict[str, object], str]:
    """The Offer fields of the provider's billing rules for an offer in `currency`, and the note a row carries."""
    rules = table.find(provider)
    if rules is None:
        return {}, UNKNOWN_RULES_NOTE
    return rules.offer_fields(currency), f"{rules.terms()} (gpuscout's billing rules table, checked {rules.checked})"


def pull_skypilot(providers: Sequence[str], gpus: Sequence[str], spot: bool | None, *,
                  home: Path | None = None, now: datetime | None = None, table: RulesTable | None = None) -> Pull:
    """Offers from SkyPilot's cached catalogs, `~/.sky/catalogs/v8/<cloud>/vms.csv`, one cloud at a time.

    Each file's prices are dated by its modification time (SkyPilot rewrites it when it pulls a catalog).
    """
    from gpuscout.hardware.skypilot import UNKNOWN_GPU, import_skypilot_catalog

    fetched = now or datetime.now().astimezone()
    root = (home or Path.home()) / ".sky" / "catalogs" / SKYPILOT_SCHEMA
    table = table or billing_rules()
    skus = wanted_gpu_skus(gpus)
    clouds = [p.strip().lower() for p in providers] or _cached_clouds(root)
    if not clouds:
        raise SpecError(f"No SkyPilot catalogs under {root}.",
                        "`--from skypilot` reads the catalogs SkyPilot caches there (one vms.csv per cloud).",
                        "Run `sky show-gpus` once with network to fill the cache, or pull --from gpuhunt.")
    offers: list[Offer] = []
    parts: list[ProviderPull] = []
    unknown: Counter[str] = Counter()
    skipped: Counter[str] = Counter()
    for cloud in clouds:
        path = root / cloud / "vms.csv"
        try:
            observed = date.fromtimestamp(path.stat().st_mtime)
            imported = import_skypilot_catalog(path, cloud=cloud, observed_at=observed, table=table)
        except (OSError, SpecError) as exc:
            why = exc.what if isinstance(exc, SpecError) else f"no cached catalog at {path} ({exc.strerror})"
            parts.append(ProviderPull(provider=cloud, error=why))
            continue
        mine = kept(imported.offers, skus, spot)
        offers += mine
        for row in imported.skipped:
            if row.reason == UNKNOWN_GPU:
                unknown[row.accelerator] += 1
            else:
                skipped[row.reason] += 1
        parts.append(ProviderPull(provider=cloud, offers=len(mine), version=f"SkyPilot catalog {SKYPILOT_SCHEMA}, "
                                  f"file dated {observed}"))
    return Pull(source="skypilot", fetched_at=fetched, offers=tuple(offers), providers=tuple(parts),
                unknown_gpus=dict(unknown), skipped=dict(skipped))


def _cached_clouds(root: Path) -> list[str]:
    try:
        return sorted(p.name for p in root.iterdir() if (p / "vms.csv").is_file())
    except OSError:
        return []


def pull_sheet(pull: Pull, command: str) -> str:
    """The pull as a price sheet: a header that says what was fetched, when and from where, then the offers."""
    header = [f"Today's offers, pulled by `{command}`",
              f"at {pull.fetched_at.isoformat(timespec='seconds')} from {pull.source}.",
              "Every offer is dated (observed_at) and names its source and catalog version; billing rules",
              "come from gpuscout's billing rules table. `gpuscout offers list` shows this sheet; `gpuscout pick",
              "--offers` ranks it (pick never fetches: pull again for newer prices).", ""]
    for part in pull.providers:
        said = f"FAILED: {part.error}" if part.error is not None else f"{part.offers} offers ({part.version})"
        header.append(f"{part.provider}: {said}".replace("\n", " "))
    if pull.unknown_gpus:
        names = ", ".join(f"{name} ×{n}" for name, n in sorted(pull.unknown_gpus.items()))
        header.append(f"skipped, GPU not in gpuscout's catalog: {names}")
    for reason, n in sorted(pull.skipped.items()):
        header.append(f"skipped, {reason}: {n}")
    header += list(pull.notes)
    return sheet_toml(pull.offers, header=header)
