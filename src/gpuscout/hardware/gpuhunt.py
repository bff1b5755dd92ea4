"""Today's offers from gpuhunt (the catalog library behind dstack), as gpuscout offers.

gpuhunt is an optional extra (`pip install 'gpuscout[offers]'`), imported only here and only when a
pull asks for it. Its items carry whole-instance $/h in USD, CPUs, RAM (GB), GPU count, name and memory
(GB per GPU), spot, disk size (GB), location and `provider_data`; no billing increment, storage price,
egress or observation date, which come from gpuscout's billing rules table and the fetch time.

Where the items come from (gpuhunt 0.1.34, read in its source): nine providers (aws, azure, gcp, …)
from offline catalogs gpuhunt collects hourly and publishes; the others (vastai, vultr, …) by live
API, some only with credentials in the environment. With `GPUHUNT_CATALOG_DIR` set, every provider is
read from `{provider}.csv` files in that folder in gpuhunt's own catalog format, and nothing is
fetched: the rows are then dated by each file's modification time.

Vast.ai: gpuhunt folds the disk into $/h (`dph_base + disk_size * storage_cost / 30 / 24`, its
vastai provider). Where the item's `provider_data` gives `storage_cost` ($/GB-month) the disk is
taken back out and billed once, as a storage item on a 30-day month; where it gives none (gpuhunt
0.1.34 keeps only `min_bid` there) the price stays as folded and no storage item is added, so the
disk is still billed exactly once, and the row says so. Vast's search is asked for rentable offers
only (its `rentable` filter), so its rows are marked available.
"""

from __future__ import annotations

import logging
import os
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from datetime import date, datetime
from pathlib import Path
from typing import Any, Protocol

from pydantic import ValidationError

from gpuscout.errors import MissingDependencyError, SpecError
from gpuscout.hardware.billing_rules import RulesTable, billing_rules
from gpuscout.hardware.offers import Offer
from gpuscout.hardware.pull import ProviderPull, Pull, billing_notes, kept, wanted_gpu_skus
from gpuscout.userfile import printable

CATALOG_DIR_ENV = "GPUHUNT_CATALOG_DIR"
INSTALL_HINT = "gpuhunt is not installed: pip install 'gpuscout[offers]'"
_VAST = "vastai"
_VAST_MONTH_H = 30 * 24  # gpuhunt's vastai provider: storage_cost / 30 / 24 (a 30-day month)


class CatalogItem(Protocol):
    """The fields of gpuhunt's `CatalogItem` this importer reads."""

    provider: str
    instance_name: str
    location: str
    price: float
    cpu: int
    memory: float
    gpu_count: int
    gpu_name: str | None
    gpu_memory: float | None
    spot: bool
    disk_size: float | None
    provider_data: Mapping[str, Any]


def gpuhunt_module() -> Any:
    """gpuhunt, imported now; a clear error when the optional extra is not installed."""
    try:
        import gpuhunt
    except ImportError:
        raise MissingDependencyError(INSTALL_HINT + ".", "`gpuscout offers pull --from gpuhunt` reads catalogs "
                                     "through gpuhunt, an optional extra.",
                                     "Install it with pip install 'gpuscout[offers]', or pull --from skypilot "
                                     "(SkyPilot's cached catalogs).") from None
    return gpuhunt


def pull_gpuhunt(providers: Sequence[str], gpus: Sequence[str], spot: bool | None, *, now: datetime | None = None,
                 table: RulesTable | None = None) -> Pull:
    """Offers from gpuhunt, one provider at a time: a provider that fails is named and the others kept."""
    gh = gpuhunt_module()
    logging.getLogger("gpuhunt").addHandler(logging.NullHandler())  # its per-provider tracebacks: we name the failure
    from gpuhunt._internal import catalog as gh_catalog  # the provider lists and the offline reader's format

    fetched = now or datetime.now().astimezone()
    table = table or billing_rules()
    skus = wanted_gpu_skus(gpus)
    folder = os.environ.get(CATALOG_DIR_ENV)
    offline, online = list(gh_catalog.OFFLINE_PROVIDERS), list(gh_catalog.ONLINE_PROVIDERS)
    known = offline + online
    asked = [p.strip().lower() for p in providers]
    bad = [p for p in asked if p not in known]
    if bad:
        raise SpecError(f"gpuhunt has no provider {', '.join(map(repr, bad))}.",
                        f"gpuhunt {_version(gh)} covers {', '.join(sorted(known))}.",
                        "Name providers as gpuhunt spells them, e.g. --provider aws --provider vastai.")
    notes: list[str] = []
    if folder is not None:
        chosen = asked or [p for p in known if (Path(folder) / f"{p}.csv").is_file()]
        fetch: Callable[[str], tuple[list[Any], str, date]] = lambda p: _from_folder(gh, Path(folder), p)  # noqa: E731
        notes.append(f"read from {CATALOG_DIR_ENV}={folder} (no network): rows dated by each file's time")
    else:
        chosen = asked or known
        fetch = _Live(gh, online, fetched)
    offers: list[Offer] = []
    parts: list[ProviderPull] = []
    unknown: Counter[str] = Counter()
    skipped: Counter[str] = Counter()
    seen: set[str] = set()
    for provider in chosen:
        try:
            items, version, observed = fetch(provider)
        except Exception as exc:
            parts.append(ProviderPull(provider=provider, error=_why(exc)))
            continue
        made = []
        for item in items:
            offer, reason = offer_from_item(item, version=version, gh_version=_version(gh), observed_at=observed,
                                            table=table)
            if offer is None:
                if reason.startswith("unknown GPU "):
                    unknown[reason.removeprefix("unknown GPU ")] += 1
                else:
                    skipped[reason] += 1
                continue
            if offer.id in seen:
                skipped["duplicate row"] += 1
                continue
            seen.add(offer.id)
            made.append(offer)
        mine = kept(made, skus, spot)
        offers += mine
        parts.append(ProviderPull(provider=provider, offers=len(mine), version=version))
    return Pull(source="gpuhunt", fetched_at=fetched, offers=tuple(offers), providers=tuple(parts),
                unknown_gpus=dict(unknown), skipped=dict(skipped), notes=tuple(notes))


def _version(gh: Any) -> str:
    return str(getattr(gh, "__version__", "") or _dist_version())


def _dist_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gpuhunt")
    except PackageNotFoundError:
        return "?"


def _why(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    cause = exc.__cause__ or exc.__context__
    if cause is not None and str(cause):
        text = f"{text} ({str(cause).splitlines()[0]})" if text else str(cause).splitlines()[0]
    return printable(f"{type(exc).__name__}: {text}" if text else type(exc).__name__, 200)


def _from_folder(gh: Any, folder: Path, provider: str) -> tuple[list[Any], str, date]:
    """A provider's items from `{provider}.csv` in the folder, read with gpuhunt's own catalog reader."""
    from gpuhunt._internal import storage

    path = folder / f"{provider}.csv"
    observed = date.fromtimestamp(path.stat().st_mtime)  # a missing file fails here, named by the caller
    with path.open(encoding="utf-8", newline="") as f:
        items = list(storage.load(f, provider=provider))
    return items, f"{path.name} in {folder}, file dated {observed}", observed


class _Live:
    """Fetches now: the offline providers' published catalogs (loaded once, all together, as gpuhunt does:
    one that fails to load is left out and named), and each online provider through its live API."""

    def __init__(self, gh: Any, online: Sequence[str], fetched: datetime) -> None:
        self.gh, self.online, self.fetched = gh, online, fetched
        self.catalog = gh.Catalog(balance_resources=False, auto_reload=False)
        self.loaded = False

    def __call__(self, provider: str) -> tuple[list[Any], str, date]:
        if provider in self.online:
            import importlib

            from gpuhunt._internal.default import ONLINE_PROVIDER_MODULES

            module, name = next((m, c) for m, c in ONLINE_PROVIDER_MODULES if m.rsplit(".", 1)[1] == provider)
            self.catalog.add_provider(getattr(importlib.import_module(module), name).from_env())  # may need credentials
            items = self.catalog.query(provider=provider)
            return items, f"live API via gpuhunt {_version(self.gh)}", self.fetched.date()
        if not self.loaded:
            self.loaded = True
            self.catalog.load()  # raises when no provider loads; one that fails is only missing below
        published = self.catalog.catalog.get(provider)
        if published is None:
            raise RuntimeError(f"gpuhunt could not load the published {provider} catalog")
        return self.catalog.query(provider=provider), f"catalog {published.version}", self.fetched.date()


_SLUG = re.compile(r"[^A-Za-z0-9._:/+-]+")


def offer_from_item(item: CatalogItem, *, version: str, gh_version: str, observed_at: date,
                    table: RulesTable) -> tuple[Offer | None, str]:
    """One gpuhunt item as an offer, or None and why it was skipped ("unknown GPU <name>" for an unknown GPU)."""
    from gpuscout.hardware.skypilot import map_gpu

    provider = item.provider.lower()
    if not item.gpu_count or not item.gpu_name:
        return None, "no GPU"
    flags = tuple(getattr(item, "flags", ()) or ())
    if flags:  # gpuhunt flags offers older dstack versions must not see: RunPod's instant clusters (2-8 pods)
        return None, f"flagged by gpuhunt ({', '.join(flags)}): not one rentable machine"
    memory_mib = item.gpu_memory * 1024 if item.gpu_memory else None  # gpuhunt: GB (GiB as the vendors state it)
    sku = map_gpu(item.gpu_name, item.instance_name, memory_mib)
    if sku is None:
        return None, f"unknown GPU {item.gpu_name}"
    rules_fields, rules_note = billing_notes(provider, table, "USD")
    rules = table.find(provider)
    notes = [rules_note]
    price = item.price
    storage: list[dict[str, Any]] = []
    available: bool | None = None
    if provider == _VAST:
        price, storage, note = _vast_unfolded(item)
        notes.append(note)
        available = True  # gpuhunt asks Vast's search for rentable offers only
    elif item.disk_size and rules is not None:
        disk = rules.storage_item(item.disk_size, "USD")
        if disk is not None:
            storage.append(disk)
    fields: dict[str, Any] = {
        "id": _SLUG.sub("-", f"{provider}-{item.instance_name}-{item.location}" + ("-spot" if item.spot else ""))
        .strip("-")[:255],
        "provider": provider if rules is None else rules.name,
        "product": item.instance_name[:255],
        "region": item.location[:255],
        "tier": "spot" if item.spot else "on-demand",
        "gpu": sku,
        "gpu_count": item.gpu_count,
        "price": price,
        "price_basis": "instance",
        "currency": "USD",  # gpuhunt's prices are USD per hour
        "vcpus": item.cpu or None,
        "ram_gb": item.memory or None,
        "observed_at": observed_at,
        "source": f"gpuhunt {gh_version}, {provider} {version}",
        "notes": "; ".join(n for n in notes if n),
        **rules_fields,
    }
    if storage:
        fields["storage"] = tuple(storage)
    elif item.disk_size:  # a disk no storage item bills comes with the price: held against the job's disk
        fields["included_disk_gb"] = item.disk_size
    if available is not None:
        fields["available"] = available
    try:
        return Offer.model_validate(fields), ""
    except ValidationError as exc:  # one odd row is skipped with its reason, never the whole pull
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "row"
        return None, printable(f"invalid offer: {where}: {first['msg']}", 120)


def _vast_unfolded(item: CatalogItem) -> tuple[float, list[dict[str, Any]], str]:
    """Vast's $/h without the disk gpuhunt folded into it, and the disk as a storage item; or the folded
    price and no storage item when the item does not say what the disk costs (the disk is billed once either way)."""
    data = item.provider_data or {}
    storage_cost, disk = _positive(data.get("storage_cost")), _positive(data.get("disk_size")) or item.disk_size
    if storage_cost is None or not disk:
        return item.price, [], ("price includes the disk (gpuhunt folds Vast's disk cost into $/h and gives no "
                                "storage_cost to take it out): the disk is not billed again")
    base = _positive(data.get("dph_base"))
    if base is None or item.spot:
        base = item.price - disk * storage_cost / _VAST_MONTH_H
    item_disk = {"name": "Vast disk", "size_gb": disk, "price_per_gb_month": storage_cost,
                 "hours_per_month": float(_VAST_MONTH_H)}
    return round(base, 6), [item_disk], (f"disk taken out of gpuhunt's $/h: {disk:g} GB at ${storage_cost:g}/GB-month "
                                         "billed once as storage")


def _positive(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if value > 0 else None
