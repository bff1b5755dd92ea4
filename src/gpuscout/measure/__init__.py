"""The bench: the job's real task timed on this machine, each case in its own process.

`bench` plans and runs the cases; `harness` isolates, times and records them; `llm_finetune`,
`llm_inference` and `image_bench` are the job slices, `probes` the machine probes; `peak_memory`,
`startup` and `fingerprint` record memory, start-up phases and the machine; `depth` extrapolates
depth-sliced runs (docs/measurement.md). `telemetry`, `gpu_telemetry` and
`cpu_telemetry` sample the machine during a run. The doctor, which uses these probes, is its own
package (`gpuscout.doctor`).

May import: `torchmodel`, `workload`, `hardware`, `results.schema` and the leaf modules; torch
only inside functions.
"""
