"""The load generator: OpenAI-compatible endpoint load tests and the network probe.

`plan` holds the typed `LoadPlan`; `session` runs it (one level, a sweep or an SLO search, with a
control run for shared prefixes) and keeps what finished when interrupted; `client` sends the
requests on absolute schedules (`schedule`), `conversation` runs multi-turn users, `workers` spreads a
level over processes; `wire` is the HTTP/1.1 client, `exchange` and `request` one request's bytes and
answer (`sse` parses the stream, `counts` holds the server's token counts against it); `monitor`
watches the level (loop lag, over-saturation, the server's /metrics via `server_metrics`); `record`
holds what was recorded; `metrics`, `detail` and `steady` turn records into a result case with the
validity gate; `redact` keeps credentials out of everything shown or stored; `workload`, `traffic`
and `trace` build the prompts; `probe` measures round trips and transfer speed (docs/measurement.md §2).

May import: `workload`, `results.schema` and the leaf modules.
"""
