"""Hardware and prices as data: the GPU catalog, offers and price sheets, currencies, SkyPilot import.

`catalog` reads gpus.toml (a source on every row, docs/gpus.md); `offers` holds the offer model
and staleness; `price_sheet` reads TOML sheets and SkyPilot `vms.csv` files (`skypilot`) and finds
offers by id; `currency` converts with user-given, dated exchange rates (docs/cost.md).

May import: the leaf modules only.
"""
