"""`gpuscout doctor`: in the first minutes of a rental, is this box what was paid for? (docs/doctor.md)

`run` runs the checks in order and returns one `BenchResult` of kind "doctor"; `inventory` reads
NVML (GPUs, driver, MIG, ECC, XIDs); `host` measures the granted cores, RAM, disk and start-up;
`plan`, `launch` and `worker` run the torchrun workers (one per GPU, or CPU processes) whose
`checks` time matmul, bandwidth, copies, peer-to-peer and all-reduce; `performance`, `health` and
`identity` turn readings into findings against the offer and the expected bands (`findings`
gathers them); `verdict` judges them into keep / inconclusive / return and the exit code; `attach`
says what the box is held against and refuses another machine's verdict on a bench result.

May import: `measure` (its probes, telemetry and harness), `torchmodel`, `workload`, `hardware`,
`results.schema` and the leaf modules; torch only inside functions.
"""
