"""The load generator: OpenAI-compatible endpoint load tests and the network probe.

`plan` holds the typed `LoadPlan`; `session` runs it (one level, a sweep or an SLO search);
`client` sends the requests on absolute schedules (`schedule`) and records every chunk; `sse`
parses the stream; `metrics` turns records into a result case with the validity gate;
`workload` builds the prompts; `probe` measures round trips and transfer speed
(docs/measurement.md).

May import: `workload`, `results.schema` and the leaf modules.
"""
