"""One serving replica under load, simulated step by step as vLLM V1 schedules (docs/serving_sim.md).

The scheduler (vllm/v1/core/sched/scheduler.py, `Scheduler.schedule`) has no prefill or decode phase:
each step it hands out one token budget, `max_num_batched_tokens`, first to the RUNNING requests in
the order they were admitted (a decode takes one token, a prompt still being prefilled takes what
is left of it, up to the budget), then, if no request was preempted this step, to the WAITING queue
in FCFS order while the budget lasts and fewer than `max_num_seqs` run. Each scheduled token needs a
KV slot; blocks of `block_tokens` are allocated as a request grows. When a running request cannot
get a block, the most recently admitted running request is preempted (recompute: its blocks freed,
its computed tokens lost, sent back to the FRONT of the waiting queue), until the block is found or
the request itself was the one preempted. A prompt's prefix-cache hits (whole blocks) are not
computed. A step's duration is `step_seconds` of the batch it ran.

Speed: the running requests in decode are kept as aggregates (count, sum of context, a count per
block phase, a heap of the step at which each finishes), so a step costs O(1) in them; steps that
only decode, between two events (an arrival that could be admitted, a finish, a block shortage),
are identical in shape except for the context that grows by one token each, so a run of them is
advanced at once with its duration in closed form (the sum of a maximum of two linear functions).
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque

from gpuscout.errors import SpecError
from gpuscout.estimator.serving.model import (
    MAX_SIM_REQUESTS,
    Arrivals,
    Percentiles,
    SimConfig,
    SimResult,
    StepCosts,
    step_seconds,
)
from gpuscout.stats import percentile

MAX_SAMPLES = 200  # points of queue length and KV use over time in a result
# Inter-token gaps kept per run of decode-only steps: their durations change linearly, and little.
ITL_SAMPLES_PER_RUN = 4
# Open loop: over the second half of the arrivals the waiting queue never emptied and grew by more
# than this share of the requests sent meanwhile (and by at least UNSTABLE_MIN_GROWTH requests). A
# stable queue at 95% load wanders by about √n, ~1.4% of 5,000 arrivals; a rate 5% past what the
# replica holds grows it by ~5%: rates closer to the limit than that read as stable in a run this long.
UNSTABLE_GROWTH_SHARE = 0.05
UNSTABLE_MIN_GROWTH = 10
ZERO = Percentiles(p50=0.0, p90=0.0, p95=0.0, p99=0.0, mean=0.0)


def simulate(config: SimConfig, arrivals: Arrivals) -> SimResult:
    """Run `arrivals` through one replica of `config`; deterministic for `arrivals.seed`.

    An open-loop rate the replica cannot sustain ends when the last request has been sent, with
    `stable=False` and what rate it does hold (a closed loop at `max_num_seqs`).
    """
    return _simulate(config, arrivals, bulk=True)


def _simulate(config: SimConfig, arrivals: Arrivals, *, bulk: bool) -> SimResult:
    run = _Run(config, arrivals, bulk=bulk)
    run.loop()
    result = run.result()
    if run.unstable:
        prompt, output = _mean_lengths(arrivals)
        held = saturated_rate(config, prompt_tokens=prompt, output_tokens=output, seed=arrivals.seed)
        sent = _offered_rate(arrivals)
        return result.model_copy(update={"stable": False, "unstable": (
            f"unstable: the queue grows without bound at {sent:.3g} req/s; the replica holds {held:.3g} req/s")})
    return result


def saturated_rate(config: SimConfig, *, prompt_tokens: int, output_tokens: int, seed: int = 0) -> float:
    """Requests a second the replica completes when always full: a closed loop of `max_num_seqs` users
    (the middle 80% of completions, leaving out the ramp up and the drain)."""
    seqs = config.limits.max_num_seqs
    requests = min(MAX_SIM_REQUESTS, max(1000, 3 * seqs))
    closed = Arrivals(kind="concurrency", concurrency=min(seqs, requests), requests=requests,
                      prompt_tokens=prompt_tokens, output_tokens=output_tokens, seed=seed)
    run = _Run(config, closed, bulk=True)
    run.loop()
    done = sorted(t for t in run.finish_t if t >= 0)
    lo, hi = int(0.1 * len(done)), int(0.9 * len(done)) - 1
    if hi <= lo or done[hi] <= done[lo]:
        return len(done) / done[-1]
    return (hi - lo) / (done[hi] - done[lo])


def _offered_rate(arrivals: Arrivals) -> float:
    if arrivals.rate_per_s is not None:
        return arrivals.rate_per_s
    rows = arrivals.trace[:arrivals.requests]
    span = rows[-1][0] - rows[0][0]
    return (len(rows) - 1) / span if span > 0 else float(len(rows))


def _mean_lengths(arrivals: Arrivals) -> tuple[int, int]:
    if arrivals.kind != "trace":
        return arrivals.prompt_tokens, arrivals.output_tokens
    rows = arrivals.trace[:arrivals.requests]
    return (max(1, round(sum(r[1] for r in rows) / len(rows))), max(1, round(sum(r[2] for r in rows) / len(rows))))


def _sum_linear(a0: float, a1: float, j0: int, j1: int) -> float:
    """Σ_{j=j0}^{j1-1} (a0 + a1·j)."""
    n = j1 - j0
    return n * a0 + a1 * (j0 + j1 - 1) * n / 2 if n > 0 else 0.0


def _sum_max_linear(a0: float, a1: float, b0: float, b1: float, k: int) -> float:
    """Σ_{j<k} max(a0 + a1·j, b0 + b1·j): two lines cross at most once, so each side of the crossing
    is one line's sum."""
    slope = a1 - b1
    if slope == 0:
        return _sum_linear(a0, a1, 0, k) if a0 >= b0 else _sum_linear(b0, b1, 0, k)
    cross = min(k, max(0, math.ceil((b0 - a0) / slope)))  # first j at or past the crossing
    if slope > 0:  # a rises past b: b below the crossing, a from it on
        return _sum_linear(b0, b1, 0, cross) + _sum_linear(a0, a1, cross, k)
    return _sum_linear(a0, a1, 0, cross) + _sum_linear(b0, b1, cross, k)


class _Run:
    """The state of one simulation. Requests are indices into plain lists (no per-token objects)."""

    def __init__(self, config: SimConfig, arrivals: Arrivals, *, bulk: bool) -> None:
        limits = config.limits
        self.costs: StepCosts = config.costs
        self.arrivals = arrivals
        self.bulk = bulk
        self.B = limits.block_tokens
        self.max_seqs = limits.max_num_seqs
        self.budget = limits.max_num_batched_tokens
        self.chunked = limits.chunked_prefill
        self.closed = arrivals.kind == "concurrency"
        n = arrivals.requests
        self.n = n
        self.send = [0.0] * n
        if arrivals.kind == "trace":
            rows = arrivals.trace[:n]
            t0 = rows[0][0]
            self.send = [r[0] - t0 for r in rows]
            self.prompt = [r[1] for r in rows]
            self.target = [r[2] for r in rows]
        else:
            self.prompt = [arrivals.prompt_tokens] * n
            self.target = [arrivals.output_tokens] * n
            if arrivals.kind == "constant":
                assert arrivals.rate_per_s is not None
                self.send = [i / arrivals.rate_per_s for i in range(n)]
            elif arrivals.kind == "poisson":
                assert arrivals.rate_per_s is not None
                rng = random.Random(arrivals.seed)
                t = 0.0
                for i in range(n):  # the first request at 0, then exponential gaps (vLLM benchmark_serving)
                    self.send[i] = t
                    t += rng.expovariate(arrivals.rate_per_s)
        B = self.B
        # Prefix-cache hits come in whole blocks (vLLM caches full blocks only), and at least the
        # prompt's last token is computed, to sample the first output token from.
        self.hit = [min(int(limits.prefix_hit_rate * p) // B * B, (p - 1) // B * B) for p in self.prompt]
        self.hit_blocks = [h // B for h in self.hit]
        # The shared prefix is one set of blocks in the cache, held once for every request using it.
        reserved = max(self.hit_blocks)
        self.free = limits.kv_blocks - reserved
        self.kv_blocks = limits.kv_blocks
        self._check_fits(limits.kv_blocks, reserved)

        # Per-request state (lists indexed by request).
        self.out = [0] * n  # output tokens produced (for a decode: as of its join step)
        self.kv = [0] * n  # tokens whose KV is computed (for a decode: as of its join step)
        self.join = [0] * n  # decode step counter when it joined the decode set
        self.version = [0] * n  # bumps when it leaves the decode set: its heap entry goes stale
        self.first_t = [-1.0] * n
        self.last_t = [0.0] * n
        self.finish_t = [-1.0] * n

        # Scheduler state. `running` keeps admission order (dict order); its only request still in
        # prefill, if any, is its last (it took the rest of a step's budget when admitted).
        self.running: dict[int, None] = {}
        self.partial: int | None = None
        self.waiting: deque[int] = deque()
        self.g = 0  # decode steps so far: a decode's tokens = its out + (g − its join)
        self.n_dec = 0
        self.sum_kv = 0  # Σ computed tokens of the decodes, now
        self.phase = [0] * B  # decodes by (kv − join) mod B: those at phase (−g) mod B need a block this step
        self.fin_heap: list[tuple[int, int, int]] = []  # (step counter at its last token, request, version)
        self.pending: list[tuple[float, int]] = []  # (time it reaches the engine, request)
        self.overhead = self.costs.request_overhead_s
        self.sent = 0
        if self.closed:
            assert arrivals.concurrency is not None
            for _ in range(min(arrivals.concurrency, n)):
                self._send(0.0)
        else:
            self.pending = [(self.send[i] + self.overhead, i) for i in range(n)]
            heapq.heapify(self.pending)
            self.sent = n

        self.now = 0.0
        self.completed = 0
        self.preemptions = 0
        self.max_queue = 0
        self.unstable = False
        self.released = 0
        self.queue_at_arrival: list[tuple[float, int]] = []
        self.samples: list[tuple[float, int, int]] = []
        self.in_system_s = 0.0
        self.itl_v: list[float] = []
        self.itl_w: list[float] = []
        self.itl_sum = 0.0  # every gap, summed exactly (the samples above stand for runs of gaps)

    def _check_fits(self, kv_blocks: int, reserved: int) -> None:
        B = self.B
        worst = max(range(self.n), key=lambda i: -(-(self.prompt[i] + self.target[i] - 1) // B) - self.hit_blocks[i])
        tokens = self.prompt[worst] + self.target[worst] - 1
        need = -(-tokens // B) - self.hit_blocks[worst]
        if need > kv_blocks - reserved:
            raise SpecError(
                f"A request of {self.prompt[worst]} prompt + {self.target[worst]} output tokens needs {need} KV "
                f"blocks of {B} tokens, but the cache holds {kv_blocks - reserved}.",
                "vLLM refuses to start when one request of the longest length cannot fit in the KV cache.",
                "Shorten the prompt or output, or give the replica more KV blocks (more GPU memory or "
                "tensor parallel).")
        if not self.chunked:
            longest = max(p + o - 1 for p, o in zip(self.prompt, self.target, strict=True))
            if longest > self.budget:
                raise SpecError(
                    f"Without chunked prefill a request of up to {longest} tokens does not fit the step budget "
                    f"max_num_batched_tokens = {self.budget}.",
                    "vLLM requires max_num_batched_tokens >= max_model_len when chunked prefill is off: a "
                    "prompt (or a preempted request's recompute) must fit one step.",
                    f"Raise max_num_batched_tokens to at least {longest}, or turn chunked prefill on.")

    # --- arrivals -------------------------------------------------------------------------------

    def _send(self, at: float) -> None:
        rid = self.sent
        self.sent += 1
        self.send[rid] = at
        heapq.heappush(self.pending, (at + self.overhead, rid))

    def _release(self) -> None:
        pending, now, waiting = self.pending, self.now, self.waiting
        while pending and pending[0][0] <= now:
            _, rid = heapq.heappop(pending)
            waiting.append(rid)
            if not self.closed:
                self.queue_at_arrival.append((self.send[rid], len(waiting)))
                self.released += 1
                if self.released == self.n:
                    self.unstable = self._grew()
        if len(waiting) > self.max_queue:
            self.max_queue = len(waiting)

    def _grew(self) -> bool:
        """Whether the waiting queue, seen at each arrival of the second half, never emptied and grew."""
        window = self.queue_at_arrival[len(self.queue_at_arrival) // 2:]
        if len(window) < 2 or min(q for _, q in window) == 0:
            return False
        ts = [t for t, _ in window]
        qs = [float(q) for _, q in window]
        mt, mq = sum(ts) / len(ts), sum(qs) / len(qs)
        var = sum((t - mt) ** 2 for t in ts)
        if var == 0:
            return qs[-1] - qs[0] >= max(UNSTABLE_MIN_GROWTH, UNSTABLE_GROWTH_SHARE * len(window))
        slope = sum((t - mt) * (q - mq) for t, q in zip(ts, qs, strict=True)) / var
        growth = slope * (ts[-1] - ts[0])
        return growth >= max(UNSTABLE_MIN_GROWTH, UNSTABLE_GROWTH_SHARE * len(window))

    # --- the loop -------------------------------------------------------------------------------

    def loop(self) -> None:
        while self.completed < self.n and not self.unstable:
            self._release()
            if self.unstable:
                break
            if not self.running and not self.waiting:
                self.now = max(self.now, self.pending[0][0])  # idle: jump to the next arrival
                continue
            before, in_system = self.now, len(self.running) + len(self.waiting)
            if not (self.bulk and self._decode_run()):
                self._step()
            # Requests in the engine × time (a request sent mid-step is counted from the next step):
            # Little's law holds it to Σ e2e, the bookkeeping check of the tests.
            self.in_system_s += in_system * (self.now - before)
            self.samples.append((self.now, len(self.waiting), self.kv_blocks - self.free))

    def _blocks_over(self, k: int) -> int:
        """Blocks the decodes need over the next k steps (each needs one every B steps, at its phase)."""
        B, g, phase = self.B, self.g, self.phase
        full, rest = divmod(k, B)
        need = full * self.n_dec
        for j in range(rest):
            need += phase[(-(g + j)) % B]
        return need

    def _kv_steps(self) -> int:
        """Decode steps that can run before the free blocks run short."""
        B, g, phase, free = self.B, self.g, self.phase, self.free
        cycles = free // self.n_dec
        left = free - cycles * self.n_dec
        k = cycles * B
        for j in range(B):
            need = phase[(-(g + k + j)) % B]  # the phase pattern repeats every B steps
            if need > left:
                return k + j
            left -= need
        return k + B

    def _next_finish(self) -> int:
        heap, version = self.fin_heap, self.version
        while heap[0][2] != version[heap[0][1]]:
            heapq.heappop(heap)
        return heap[0][0]

    def _decode_run(self) -> bool:
        """Advance a run of ≥ 2 decode-only steps at once, if the next steps are such; False if not."""
        if self.partial is not None or self.n_dec == 0 or (self.waiting and len(self.running) < self.max_seqs):
            return False
        k = self._next_finish() - self.g
        if k < 2:
            return False
        k = min(k, self._kv_steps())
        if k < 2:
            return False
        n, c = self.n_dec, self.costs
        r0 = self.sum_kv + n  # context read (and query·key pairs) of the first step; + n each step
        share = 1.0 - (1.0 - c.experts_touched_per_token) ** n
        fixed = c.overhead_s + c.comm_s_per_token * n
        m0 = c.weights_s + c.expert_weights_s * share + c.kv_read_s_per_token * r0
        m1 = c.kv_read_s_per_token * n
        p0 = c.compute_s_per_token * n + c.attention_s_per_pair * r0
        p1 = c.attention_s_per_pair * n

        def total(steps: int) -> float:
            return steps * fixed + _sum_max_linear(m0, m1, p0, p1, steps)

        if self.pending:
            # Stop with the step during which the next request arrives: the one after admits it (or,
            # with max_num_seqs running, queues it: the queue is then seen at each arrival, as stepping
            # one step at a time sees it, so an unstable run stops at the same step either way).
            gap = self.pending[0][0] - self.now
            if total(k) >= gap:
                lo, hi = 1, k
                while lo < hi:
                    mid = (lo + hi) // 2
                    if total(mid) >= gap:
                        hi = mid
                    else:
                        lo = mid + 1
                k = lo
                if k < 2:
                    return False
        self.free -= self._blocks_over(k)
        samples = min(k, ITL_SAMPLES_PER_RUN)
        weight = n * k / samples
        for i in range(samples):
            j = (2 * i + 1) * k // (2 * samples)
            self.itl_v.append(fixed + max(m0 + m1 * j, p0 + p1 * j))
            self.itl_w.append(weight)
        elapsed = total(k)
        self.itl_sum += n * elapsed
        self.now += elapsed
        self.g += k
        self.sum_kv += n * k
        self._finish_decodes()
        return True

    # --- one step -------------------------------------------------------------------------------

    def _step(self) -> None:
        B, g = self.B, self.g
        preempted = False
        if self.n_dec:
            need = self.phase[(-g) % B]
            if need > self.free:
                preempted = self._decode_walk()
            else:
                self.free -= need
        n_dec = self.n_dec
        left = self.budget - n_dec
        chunks: list[tuple[int, int, int]] = []  # (request, computed before, new tokens)
        part = self.partial
        if part is not None and left > 0:
            s = self.kv[part]
            c = min(self.prompt[part] + self.out[part] - s, left)
            new = -(-(s + c) // B) - -(-s // B)
            if new > self.free:
                self._preempt_partial()  # it is the last admitted: vLLM preempts it, itself
                preempted = True
            else:
                self.free -= new
                chunks.append((part, s, c))
                left -= c
        if not preempted:
            left = self._admit(left, chunks)
        # The step's batch and its time.
        new_tokens = n_dec
        context = self.sum_kv + n_dec
        pairs = context
        for _, s, c in chunks:
            new_tokens += c
            context += s + c
            pairs += c * s + c * (c + 1) // 2
        if new_tokens == 0:
            # Nothing could run (a waiting head whose blocks are not free and nothing running to free
            # them cannot happen: _check_fits guarantees one request fits an empty cache).
            raise AssertionError("a step with nothing scheduled")
        d = step_seconds(self.costs, new_tokens=new_tokens, context_tokens_read=context, attention_pairs=pairs)
        end = self.now + d
        if n_dec:
            self.itl_v.append(d)
            self.itl_w.append(float(n_dec))
            self.itl_sum += n_dec * d
            self.g += 1
            self.sum_kv += n_dec
        self.now = end
        self._finish_decodes()
        for rid, s, c in chunks:
            self.kv[rid] = s + c
            if s + c < self.prompt[rid] + self.out[rid]:
                continue  # still prefilling: the step's budget ran out
            if self.partial == rid:
                self.partial = None
            self.out[rid] += 1  # the prefill's last position samples a token
            if self.first_t[rid] < 0:
                self.first_t[rid] = end
            else:  # a recompute after preemption: the gap since its last token includes the requeue
                self.itl_v.append(end - self.last_t[rid])
                self.itl_w.append(1.0)
                self.itl_sum += end - self.last_t[rid]
            self.last_t[rid] = end
            if self.out[rid] >= self.target[rid]:
                self._finish(rid, end, s + c)
            else:
                self._join_decodes(rid)

    def _admit(self, left: int, chunks: list[tuple[int, int, int]]) -> int:
        """Admit waiting requests in FCFS order while the budget, max_num_seqs and free blocks allow."""
        B, waiting, running = self.B, self.waiting, self.running
        while waiting and left > 0 and len(running) < self.max_seqs:
            rid = waiting[0]
            s = self.hit[rid]
            rem = self.prompt[rid] + self.out[rid] - s  # a preempted request recomputes its outputs too
            if not self.chunked and rem > left:
                break
            c = min(rem, left)
            new = -(-(s + c) // B) - self.hit_blocks[rid]
            if new > self.free:
                break  # vLLM stops admitting at the first request whose blocks are not free
            waiting.popleft()
            self.free -= new
            running[rid] = None
            chunks.append((rid, s, c))
            left -= c
            if c < rem:
                self.partial = rid
        return left

    def _decode_walk(self) -> bool:
        """The decodes in admission order take their blocks one by one; when none is free, the last
        admitted running request is preempted, until one is (or the one asking was preempted)."""
        B, g = self.B, self.g
        order = [r for r in self.running if r != self.partial]
        free = self.free
        preempted = False
        i = 0
        while i < len(order):
            rid = order[i]
            if (self.kv[rid] + g - self.join[rid]) % B == 0:
                while free < 1:
                    preempted = True
                    if self.partial is not None:
                        self.free = free
                        self._preempt_partial()
                        free = self.free
                        continue
                    victim = order.pop()
                    self.free = free
                    self._preempt_decode(victim)
                    free = self.free
                    if victim == rid:
                        break
                if i >= len(order):  # it preempted itself: nothing after it was left
                    break
                free -= 1
            i += 1
        self.free = free
        return preempted

    def _blocks_of(self, rid: int, kv: int) -> int:
        return max(0, -(-kv // self.B) - self.hit_blocks[rid])

    def _preempt_partial(self) -> None:
        rid = self.partial
        assert rid is not None
        self.partial = None
        self.free += self._blocks_of(rid, self.kv[rid])
        self.kv[rid] = 0
        del self.running[rid]
        self.waiting.appendleft(rid)
        self.preemptions += 1

    def _preempt_decode(self, rid: int) -> None:
        steps = self.g - self.join[rid]
        kv = self.kv[rid] + steps
        self._leave_decodes(rid, kv)
        self.out[rid] += steps
        self.free += self._blocks_of(rid, kv)
        self.kv[rid] = 0
        del self.running[rid]
        self.waiting.appendleft(rid)
        self.preemptions += 1

    def _join_decodes(self, rid: int) -> None:
        kv = self.kv[rid]
        self.join[rid] = self.g
        self.phase[(kv - self.g) % self.B] += 1
        self.n_dec += 1
        self.sum_kv += kv
        heapq.heappush(self.fin_heap, (self.g + self.target[rid] - self.out[rid], rid, self.version[rid]))

    def _leave_decodes(self, rid: int, kv_now: int) -> None:
        self.phase[(self.kv[rid] - self.join[rid]) % self.B] -= 1
        self.n_dec -= 1
        self.sum_kv -= kv_now
        self.version[rid] += 1

    def _finish_decodes(self) -> None:
        heap, version, g = self.fin_heap, self.version, self.g
        while heap and heap[0][0] <= g:
            _, rid, v = heapq.heappop(heap)
            if v != version[rid]:
                continue
            steps = g - self.join[rid]
            kv = self.kv[rid] + steps
            self._leave_decodes(rid, kv)
            self.out[rid] += steps
            self.last_t[rid] = self.now
            self._finish(rid, self.now, kv)

    def _finish(self, rid: int, at: float, kv: int) -> None:
        del self.running[rid]
        self.free += self._blocks_of(rid, kv)
        self.finish_t[rid] = at
        self.completed += 1
        if self.closed and self.sent < self.n:
            self._send(at)  # the user sends its next request as soon as its reply ends

    # --- the result -----------------------------------------------------------------------------

    def result(self) -> SimResult:
        done = [i for i in range(self.n) if self.finish_t[i] >= 0]
        ttft = [self.first_t[i] - self.send[i] for i in done]
        e2e = [self.finish_t[i] - self.send[i] for i in done]
        tpot = [(self.finish_t[i] - self.first_t[i]) / (self.target[i] - 1) if self.target[i] > 1 else 0.0
                for i in done]
        duration = max((self.finish_t[i] for i in done), default=self.now)
        duration = max(duration, self.now if self.unstable else 0.0)
        tokens = sum(self.target[i] for i in done)
        thinned = _thin(self.samples, duration)
        return SimResult(
            arrivals=self.arrivals, completed=len(done), duration_s=duration,
            ttft_s=_percentiles(ttft), itl_s=_weighted_percentiles(self.itl_v, self.itl_w, self.itl_sum),
            tpot_s=_percentiles(tpot), e2e_s=_percentiles(e2e),
            requests_per_s=len(done) / duration if duration > 0 else 0.0,
            output_tokens_per_s=tokens / duration if duration > 0 else 0.0,
            preemptions=self.preemptions, max_queue=self.max_queue,
            queue_len=tuple((t, q) for t, q, _ in thinned),
            kv_used=tuple((t, b / self.kv_blocks) for t, _, b in thinned),
            stable=True, unstable=None,
            per_request=tuple((a, b, c) for a, b, c in zip(ttft, tpot, e2e, strict=True)))


def _percentiles(values: list[float]) -> Percentiles:
    if not values:
        return ZERO
    ordered = sorted(values)
    return Percentiles(p50=percentile(ordered, 50), p90=percentile(ordered, 90), p95=percentile(ordered, 95),
                       p99=percentile(ordered, 99), mean=max(0.0, math.fsum(ordered) / len(ordered)))


def _weighted_percentiles(values: list[float], weights: list[float], exact_sum: float) -> Percentiles:
    """Percentiles of values each standing for `weight` gaps (the smallest value whose cumulative
    weight reaches the share); the mean from the exact sum of the gaps."""
    if not values:
        return ZERO
    pairs = sorted(zip(values, weights, strict=True))
    total = math.fsum(weights)
    marks = {50: 0.0, 90: 0.0, 95: 0.0, 99: 0.0}
    targets = sorted(marks)
    acc, t = 0.0, 0
    for value, weight in pairs:
        acc += weight
        while t < len(targets) and acc >= total * targets[t] / 100 * (1 - 1e-12):
            marks[targets[t]] = value
            t += 1
        if t == len(targets):
            break
    for q in targets[t:]:
        marks[q] = pairs[-1][0]
    mean = exact_sum / total
    return Percentiles(p50=marks[50], p90=marks[90], p95=marks[95], p99=marks[99], mean=mean)


def _thin(samples: list[tuple[float, int, int]], duration: float) -> list[tuple[float, int, int]]:
    """At most MAX_SAMPLES points: the largest queue (and KV use) in each equal slice of the run."""
    if len(samples) <= MAX_SAMPLES or duration <= 0:
        return samples
    bins: dict[int, tuple[float, int, int]] = {}
    for t, q, b in samples:
        k = min(MAX_SAMPLES - 1, int(t / duration * MAX_SAMPLES))
        prev = bins.get(k)
        bins[k] = (t, max(q, prev[1]), max(b, prev[2])) if prev else (t, q, b)
    return [bins[k] for k in sorted(bins)]
