"""The load generator: OpenAI-compatible endpoint load tests and the network probe.

`plan` holds the typed `LoadPlan`; `session` runs it (one level, a sweep or an SLO search) and
keeps what finished when interrupted; `client` sends the requests on absolute schedules
(`schedule`) and records every chunk, within size and time bounds; `sse` parses the stream (any
JSON shape, linear-time lines); `counts` holds the server's token counts against the stream;
`metrics` turns records into a result case with the validity gate; `redact` keeps credentials out
of everything shown or stored; `workload` builds the prompts; `probe` measures round trips and
transfer speed (docs/measurement.md §2).

May import: `workload`, `results.schema` and the leaf modules.
"""
