"""The estimator: memory and speed of a job on a GPU, without renting one.

Memory per term with its formula and source (`training`, `inference`, `image`, `activations`,
`overhead`; one entry point in `memory`), fit, fixes and limits (`fit`, `screen`), and a roofline
speed model with cited efficiency factors (the `speed` package, `efficiency.toml`). Pure functions: no torch,
no I/O beyond its own data files (docs/estimator.md).

May import: `workload`, `hardware` and the leaf modules.
"""
