"""Rendering only: console tables, Markdown and JSON for every command, with one number formatter.

Each module renders one command's result (`estimate`, `pick`, `compare`, `bench`, `load`, `probe`,
`model`, `catalog`, `examples`; `estimate_detail` and `compare_cells` hold the parts of the two
largest); `payload` builds `--json`; `numbers` formats every figure; `layout` and `footnotes`
keep every table legible at 80 columns (figures never wrap, formulas and sources are numbered
footnotes under the table, `--wide` adds columns); `progress` draws the bench's and the doctor's
progress bars on stderr from the steps they report (`load` draws the load levels'); the `html`
package draws the offline HTML report. Nothing here computes a result.

May import: every library package (not `api` or `cli`).
"""
