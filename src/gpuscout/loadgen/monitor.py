"""What runs beside a measured level: the client's event-loop lag, the over-saturation stop, /metrics scrapes.

* Loop lag: a timer asked to fire every `LAG_TICK_S` records how late it fired. A loop busy with
  callbacks fires late, and then every stamp it takes (sends, chunk arrivals) is late too: it is
  the direct sign of a saturated client, read by the validity gate (`metrics.validity`).
* Over-saturation (open loop only: a closed loop's queue is bounded by its concurrency): every
  `CHECK_S` the requests so far are judged by `steady.oversaturated`; two verdicts in a row stop
  the level, its in-flight requests cancelled as `stopped_oversaturated`, and the reason recorded.
* Server metrics: with a /metrics URL, one scrape before t0, one every `SCRAPE_S` during the level,
  one after it (`server_metrics`). A page that cannot be read is noted once and no longer asked for.
  The API key goes with the scrapes only when /metrics is on the endpoint's own host and port
  (`same_origin`): a key is sent only where it was given for.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from gpuscout.loadgen import steady
from gpuscout.loadgen.exchange import Live, PlainSink, scrub_text
from gpuscout.loadgen.record import ServerSample
from gpuscout.loadgen.server_metrics import MAX_METRICS_BYTES, MetricOutOfRange, parse_prometheus, read_server
from gpuscout.loadgen.wire import Pool, StopReading, Target, WireError, http_url

LAG_TICK_S = 0.010
CHECK_S = 0.5
SCRAPE_S = 1.0
SCRAPE_TIMEOUT_S = 5.0
MAX_LAG_SAMPLES = 100_000  # 1000 s of ticks; later ones are not kept


def same_origin(a: Target, b: Target) -> bool:
    """One server: the same scheme, host and port (the web's origin, RFC 6454)."""
    return (a.tls, a.host.lower(), a.port) == (b.tls, b.host.lower(), b.port)


class Watch:
    """The monitors of one level; `stopped` says why it was stopped early, `notes` what went wrong."""

    def __init__(self, metrics_url: str | None, headers: dict[str, str], secrets: tuple[str, ...], *,
                 watch_saturation: bool, lives: list[Live], endpoint: Target | None = None) -> None:
        self.metrics_url, self.secrets = metrics_url, secrets
        target = Target.parse(http_url(metrics_url, "Pass the server's /metrics URL, e.g. http://127.0.0.1:8000/metrics"))\
            if metrics_url else None
        self.headers = {k: v for k, v in headers.items() if k != "content-type"} | {"accept": "text/plain"}
        if target is None or endpoint is None or not same_origin(target, endpoint):
            self.headers.pop("authorization", None)
        self.watching = watch_saturation
        self.lives = lives
        self.loop_lag_s: list[float] = []
        self.loop_busy: list[float] = []  # per lag sample: the loop thread's CPU share of that tick's interval
        self._due: float | None = None  # when the lag timer now waiting should fire (loop.time())
        self._tick = (0.0, 0.0)  # that tick's start: loop.time() and the thread's CPU time
        self.notes: list[str] = []
        self.stopped: str | None = None
        self.engine: str | None = None
        self.samples: list[tuple[float, dict[str, float]]] = []  # (perf_counter, values)
        self.tasks: list[asyncio.Task[None]] = []
        self.t0 = 0.0
        self.pool = Pool(target, SCRAPE_TIMEOUT_S) if target is not None else None

    async def before(self) -> None:
        await self.scrape()

    def start(self, t0: float) -> None:
        self.t0 = t0
        self.tasks.append(asyncio.create_task(self._lag()))
        if self.watching:
            self.tasks.append(asyncio.create_task(self._saturation()))
        if self.pool is not None:
            self.tasks.append(asyncio.create_task(self._scrapes()))

    async def stop(self) -> None:
        self._pending_lag()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.tasks.clear()
        with contextlib.suppress(asyncio.CancelledError):
            await self.scrape()
        if self.pool is not None:
            self.pool.close()

    def server_samples(self, t0: float) -> list[ServerSample]:
        return [ServerSample(t_s=t - t0, values=v) for t, v in self.samples]

    async def _lag(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._tick = (loop.time(), time.thread_time())
            self._due = self._tick[0] + LAG_TICK_S
            await asyncio.sleep(LAG_TICK_S)
            self._sample(loop.time())
            self._due = None

    def _sample(self, now: float) -> None:
        """How late the tick fired, and the share of its interval this thread (the loop's) spent on a CPU:
        near 1 the loop was late from its own work, well below it was descheduled or blocked."""
        if self._due is None or len(self.loop_lag_s) >= MAX_LAG_SAMPLES:
            return
        start, cpu = self._tick
        self.loop_lag_s.append(max(0.0, now - self._due))
        self.loop_busy.append(min(1.0, (time.thread_time() - cpu) / max(now - start, 1e-9)))

    def _pending_lag(self) -> None:
        """The tick still waiting at the stop, when it is overdue: a loop blocked in long callbacks fires its
        timer a few times a run, or never, and that lateness is the sign of saturation the gate reads."""
        now = asyncio.get_running_loop().time()
        if self._due is not None and now > self._due:
            self._sample(now)
        self._due = None

    async def _saturation(self) -> None:
        strikes = 0
        while self.stopped is None:
            await asyncio.sleep(CHECK_S)
            now = time.perf_counter()
            measured = [(x.intended, x.chunks[0] if x.chunks else None, x.end) for x in self.lives if not x.warmup]
            why = steady.oversaturated(measured, now, self.t0)
            strikes = strikes + 1 if why else 0
            if why and strikes >= 2:
                self.stopped = f"over-saturated: {why}"

    async def _scrapes(self) -> None:
        while self.pool is not None:
            await asyncio.sleep(SCRAPE_S)
            await self.scrape()

    async def scrape(self) -> None:
        """One GET of /metrics; a failure is noted and stops further scrapes."""
        if self.pool is None:
            return
        live = Live(0, 0, True, 0.0)
        sink = PlainSink(live, self.secrets, False, 0, False)
        sink.cap = MAX_METRICS_BYTES
        request = self.pool.target.request("GET", self.headers)
        conn = None
        try:
            async with asyncio.timeout(SCRAPE_TIMEOUT_S):
                conn = await self.pool.acquire()
                sink.conn = conn
                done = conn.exchange(request, sink)[1]
                await done
        except (TimeoutError, WireError, StopReading) as exc:
            live.error = live.error or f"{type(exc).__name__}: {scrub_text(exc, self.secrets)}"
        finally:
            sink.close()
            if conn is not None:
                self.pool.release(conn)
        self._keep(live, b"".join(sink.parts))

    def _keep(self, live: Live, body: bytes) -> None:
        if live.error is None and live.status == 200:
            try:
                engine, values = read_server(parse_prometheus(body.decode("utf-8", "replace")))
            except MetricOutOfRange as exc:  # one impossible value: none of its pages are trusted
                self.samples.clear()
                live.error = f"{scrub_text(exc, self.secrets)}; none of its pages are kept"
            else:
                if values:
                    self.engine = self.engine or engine
                    self.samples.append((time.perf_counter(), values))
                    return
                live.error = "no metric gpuscout reads (vLLM, SGLang, TGI or llama.cpp names) on the page"
        self.notes.append(f"server metrics not read from {scrub_text(self.metrics_url, self.secrets)}: "
                          f"{live.error or f'HTTP {live.status}'}; no further scrapes")
        if self.pool is not None:
            self.pool.close()
        self.pool = None
