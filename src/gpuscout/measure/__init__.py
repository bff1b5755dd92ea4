"""The bench: the job's real task timed on this machine, each case in its own process.

`bench` plans and runs the cases; `harness` isolates, times and records them; `llm_setup`,
`llm_finetune`, `llm_inference`, `image_bench` and `video_bench` are the job slices (`generation`
times a diffusion batch for the image and video slices alike), `probes` the machine probes;
`peak_memory`, `startup` and `fingerprint` record memory, start-up phases and the machine; `depth`
extrapolates depth-sliced runs (docs/measurement.md). `telemetry`, `gpu_telemetry` and
`cpu_telemetry` sample the machine during a run. `progress` is how a run reports its steps: measure
draws nothing, `report.progress` draws the bar. The doctor, which uses these probes, is its own
package (`gpuscout.doctor`).

May import: `torchmodel`, `workload`, `hardware`, `results.schema` and the leaf modules; torch
only inside functions.
"""
