"""gpuscout's own JSON read back: `--json` outputs, result files and stored runs, as typed documents.

`gpuscout report` draws any of them. Each document is validated against the model that wrote it
(an estimate's `Screening`, a pick's `PickResult`, a comparison, a `BenchResult`), so a damaged or
foreign file is refused with a message instead of being drawn wrong. Results of kinds this version
draws no special view for (doctor, probe, a kind added later) become `ChecksDoc`: every case and
metric, with any expected band the result carries.
"""
