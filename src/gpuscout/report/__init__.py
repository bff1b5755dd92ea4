"""Rendering only: console tables, Markdown and JSON for every command, with one number formatter.

Each module renders one command's result (`estimate`, `pick`, `compare`, `bench`, `load`, `probe`,
`model`, `catalog`, `examples`); `payload` builds `--json`; `numbers` formats every figure.
Nothing here computes a result.

May import: every library package (not `api` or `cli`).
"""
