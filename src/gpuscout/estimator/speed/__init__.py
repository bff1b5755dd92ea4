"""The speed model: how long a job takes on a GPU, with an error band and the bound of each phase.

`estimate` is the one entry point (`estimate_speed`); `roofline` prices a phase from its FLOPs and
bytes with the achieved-efficiency factors of `efficiency.toml`; `train`, `serve`, `image`,
`video` and `colocate` build the phases of each job kind.
"""
