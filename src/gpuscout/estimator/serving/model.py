"""The serving simulator's vocabulary: what one engine step costs, the engine's limits, the load, the result.

One replica of an LLM server (tensor parallel inside it) is simulated step by step, as vLLM V1 runs it
(docs/serving_sim.md): every step the scheduler picks a batch of new tokens (one per running decode,
chunks of waiting prompts) under a token budget, and the step's duration is a function of what that
batch holds. `StepCosts` is that function's coefficients; `step_seconds` is the function.

Every bound below is far past any real deployment, and small enough that a simulation stays finite
and fast; a value outside it is refused with the range, never clamped.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from gpuscout.frozen import Frozen

# One engine step of an hour is far past any real one (a 1M-token prefill of a 1T-parameter model on
# one GPU is ~2e18 FLOPs: under an hour at 1 PFLOP/s): a larger cost is a unit mistake (ms for s).
MAX_STEP_S = 3600.0
MAX_SEQS = 1_000_000  # max_num_seqs: the job spec's own bound on concurrency (workload.job.MAX_CONCURRENCY)
MAX_BATCHED_TOKENS = 100_000_000  # max_num_batched_tokens: the job spec's bound
MAX_KV_BLOCKS = 10**9  # 16e9 tokens of KV at 16 tokens a block: far past any GPU's memory
MAX_BLOCK_TOKENS = 1024  # vLLM accepts block sizes up to a few hundred; Mooncake traces use 512
# Requests one simulation runs: ~100 s of simulation at the benchmark's ~10,000 requests a second
# (benchmarks/serving_sim_speed.py); a percentile needs thousands, not millions.
MAX_SIM_REQUESTS = 1_000_000
MAX_SIM_CONCURRENCY = 1_000_000  # the job spec's bound (workload.job.MAX_CONCURRENCY)
MAX_SIM_RATE = 1_000_000.0  # requests a second
MAX_SIM_TOKENS = 10_000_000  # prompt or output tokens of one request: the job spec's MAX_CONTEXT
MAX_TRACE_SECONDS = 7 * 86_400.0  # the longest public serving trace (Azure LLM inference 2024) spans a week
MAX_TENSOR_PARALLEL = 64  # the job spec's bound

Seconds = float


class ServingValue(Frozen):
    # inf or NaN in a cost or a rate would make every time inf or NaN; refused like a job spec's.
    model_config = ConfigDict(allow_inf_nan=False)


class StepCosts(ServingValue):
    """Seconds one engine step of ONE replica takes, as a function of the batch it runs.

    The memory side reads the weights once per step, the experts the step's tokens touch, and the KV
    cache of every token attended to; the compute side is the new tokens' matmul FLOPs and the
    attention's query·key pairs. A step takes the slower side (a roofline: decode steps are memory
    bound, prefill chunks compute bound) plus the fixed host overhead and the tensor-parallel
    all-reduces of its new tokens.
    """

    overhead_s: float = Field(ge=0, le=MAX_STEP_S)  # per step: scheduling, kernel launches, sampling
    weights_s: float = Field(ge=0, le=MAX_STEP_S)  # reading the non-expert weights once
    expert_weights_s: float = Field(0.0, ge=0, le=MAX_STEP_S)  # reading ALL expert weights once; 0 dense
    experts_touched_per_token: float = Field(0.0, ge=0, le=1)  # k/E of a mixture of experts; 0 dense
    kv_read_s_per_token: float = Field(ge=0, le=MAX_STEP_S)  # reading one cached token's K and V
    compute_s_per_token: float = Field(ge=0, le=MAX_STEP_S)  # linear + lm_head FLOPs of one new token
    attention_s_per_pair: float = Field(ge=0, le=MAX_STEP_S)  # attention FLOPs of one query·key pair
    comm_s_per_token: float = Field(0.0, ge=0, le=MAX_STEP_S)  # TP all-reduces of one new token; 0 at TP 1
    request_overhead_s: float = Field(0.0, ge=0, le=MAX_STEP_S)  # host time of a request's first token only
    source: str = Field(min_length=1, max_length=500)  # "estimate: <gpu> …" or "calibrated from <result>"

    @model_validator(mode="after")
    def _experts_need_both(self) -> StepCosts:
        if (self.expert_weights_s > 0) != (self.experts_touched_per_token > 0):
            raise ValueError(
                f"expert_weights_s = {self.expert_weights_s} and experts_touched_per_token = "
                f"{self.experts_touched_per_token}: a mixture of experts needs both above 0 (the experts' "
                "read time and the share k/E one token routes to), a dense model both 0")
        return self

    @model_validator(mode="after")
    def _a_step_takes_time(self) -> StepCosts:
        if self.overhead_s + self.weights_s + self.compute_s_per_token == 0:
            raise ValueError("overhead_s, weights_s and compute_s_per_token are all 0: a step would take no "
                             "time and a simulation would never advance; give at least one of them")
        return self


def step_seconds(costs: StepCosts, *, new_tokens: int, context_tokens_read: int, attention_pairs: int) -> float:
    """Seconds one step takes that computes `new_tokens` tokens, reads `context_tokens_read` cached
    tokens' KV and computes `attention_pairs` query·key pairs.

    A step whose tokens route to experts reads only the experts touched: with T tokens each picking
    k of E experts independently, an expert is untouched with probability (1 − k/E)^T, so the share
    read is 1 − (1 − k/E)^T (one token reads k/E of them; a large batch reads nearly all).
    """
    expert_share = 1.0 - (1.0 - costs.experts_touched_per_token) ** new_tokens if new_tokens else 0.0
    memory = (costs.weights_s + costs.expert_weights_s * expert_share
              + costs.kv_read_s_per_token * context_tokens_read)
    compute = costs.compute_s_per_token * new_tokens + costs.attention_s_per_pair * attention_pairs
    return costs.overhead_s + max(memory, compute) + costs.comm_s_per_token * new_tokens


class EngineLimits(ServingValue):
    """The engine's scheduler settings and KV cache size (vLLM's names and defaults)."""

    max_num_seqs: int = Field(gt=0, le=MAX_SEQS)  # requests running at once
    max_num_batched_tokens: int = Field(gt=0, le=MAX_BATCHED_TOKENS)  # new tokens one step may compute
    kv_blocks: int = Field(gt=0, le=MAX_KV_BLOCKS)  # KV cache blocks the GPU memory holds
    block_tokens: int = Field(16, gt=0, le=MAX_BLOCK_TOKENS)  # tokens a block holds (vLLM block_size 16)
    # vLLM V1 always chunks prefills (its scheduler has no separate prefill phase); False: a prompt is
    # scheduled whole or not at all, as with enable_chunked_prefill=False in V0.
    chunked_prefill: bool = True
    # Share of each prompt found in the prefix cache: skipped, as vLLM skips cached blocks. Below 1:
    # vLLM recomputes at least a prompt's last token to sample the first output token.
    prefix_hit_rate: float = Field(0.0, ge=0, lt=1)

    @model_validator(mode="after")
    def _a_decode_per_seq_fits(self) -> EngineLimits:
        # vLLM refuses the same at startup (vllm/config/scheduler.py, SchedulerConfig._verify_args): every
        # running sequence must be able to take one token of a step's budget.
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be at least "
                             f"max_num_seqs ({self.max_num_seqs}), as vLLM requires: each running request "
                             "decodes one token a step; raise the first or lower the second")
        return self

    @property
    def kv_tokens(self) -> int:
        return self.kv_blocks * self.block_tokens


class SimConfig(ServingValue):
    """One replica: what its steps cost and how its engine schedules."""

    costs: StepCosts
    limits: EngineLimits
    tensor_parallel: int = Field(1, gt=0, le=MAX_TENSOR_PARALLEL)  # informational: costs already hold it


TraceRow = tuple[float, int, int]  # send time (s after the first), prompt tokens, output tokens


class Arrivals(ServingValue):
    """How requests reach the replica.

    * "concurrency": `concurrency` users, each sending its next request when its previous one
      finishes (a closed loop, as `gpuscout load --concurrency` runs it);
    * "poisson": an open loop, exponential gaps at mean `rate_per_s` (seeded);
    * "constant": an open loop, one request every 1 / `rate_per_s` seconds;
    * "trace": the rows' send times and lengths (the first `requests` rows; prompt_tokens and
      output_tokens are not used).
    """

    kind: Literal["concurrency", "poisson", "constant", "trace"]
    concurrency: int | None = Field(None, gt=0, le=MAX_SIM_CONCURRENCY)
    rate_per_s: float | None = Field(None, gt=0, le=MAX_SIM_RATE)
    requests: int = Field(gt=0, le=MAX_SIM_REQUESTS)
    prompt_tokens: int = Field(gt=0, le=MAX_SIM_TOKENS)
    output_tokens: int = Field(gt=0, le=MAX_SIM_TOKENS)
    trace: tuple[TraceRow, ...] = Field((), max_length=MAX_SIM_REQUESTS)
    seed: int = Field(0, ge=0, le=2**63 - 1)

    @model_validator(mode="after")
    def _kind_has_its_numbers(self) -> Arrivals:
        if self.kind == "concurrency" and self.concurrency is None:
            raise ValueError("kind = 'concurrency' needs concurrency (users, each waiting for its reply)")
        if self.kind in ("poisson", "constant") and self.rate_per_s is None:
            raise ValueError(f"kind = {self.kind!r} needs rate_per_s (requests a second)")
        if self.kind != "concurrency" and self.concurrency is not None:
            raise ValueError(f"concurrency = {self.concurrency} is for kind = 'concurrency', not {self.kind!r}; "
                             "drop it")
        if self.kind not in ("poisson", "constant") and self.rate_per_s is not None:
            raise ValueError(f"rate_per_s = {self.rate_per_s} is for kind = 'poisson' or 'constant', not "
                             f"{self.kind!r}; drop it")
        if self.kind == "trace":
            if not self.trace:
                raise ValueError("kind = 'trace' needs trace rows (send time s, prompt tokens, output tokens)")
            if self.requests > len(self.trace):
                raise ValueError(f"requests = {self.requests} but the trace has {len(self.trace)} rows; "
                                 f"ask for at most {len(self.trace)}")
            self._check_trace()
        elif self.trace:
            raise ValueError(f"trace rows are for kind = 'trace', not {self.kind!r}; drop them")
        return self

    def _check_trace(self) -> None:
        previous = 0.0
        for number, (at, prompt, output) in enumerate(self.trace, 1):
            if not 0 <= at <= MAX_TRACE_SECONDS or at != at:
                raise ValueError(f"trace row {number}: send time {at} s is outside 0 … {MAX_TRACE_SECONDS:.0f} s")
            if at < previous:
                raise ValueError(f"trace row {number}: send time {at} s is before row {number - 1}'s "
                                 f"{previous} s; sort the rows by send time")
            for name, value in (("prompt", prompt), ("output", output)):
                if not 1 <= value <= MAX_SIM_TOKENS:
                    raise ValueError(f"trace row {number}: {name} tokens {value} is outside 1 … {MAX_SIM_TOKENS}")
            previous = at


class Percentiles(ServingValue):
    """A latency's distribution over the simulated requests (or inter-token gaps), in seconds."""

    p50: float = Field(ge=0)
    p90: float = Field(ge=0)
    p95: float = Field(ge=0)
    p99: float = Field(ge=0)
    mean: float = Field(ge=0)


class SimResult(ServingValue):
    """What one simulation gives, in the same terms `gpuscout load` measures.

    TTFT counts from the request's intended send (so queueing is in it) and includes the request's
    host overhead; ITL is every gap between two output tokens of one request; TPOT is a request's
    (e2e − TTFT) / (output tokens − 1). `queue_len` and `kv_used` (share of the KV blocks in use)
    are sampled over time, at most ~200 points each (the largest value in each slice of the run).
    """

    arrivals: Arrivals
    completed: int = Field(ge=0)
    duration_s: float = Field(ge=0)
    ttft_s: Percentiles
    itl_s: Percentiles
    tpot_s: Percentiles
    e2e_s: Percentiles
    requests_per_s: float = Field(ge=0)
    output_tokens_per_s: float = Field(ge=0)
    preemptions: int = Field(ge=0)
    max_queue: int = Field(ge=0)
    queue_len: tuple[tuple[float, int], ...]
    kv_used: tuple[tuple[float, float], ...]
    stable: bool
    unstable: str | None = None
    # Each completed request's (TTFT, TPOT, e2e) in seconds, in send order: what goodput counts.
    per_request: tuple[tuple[float, float, float], ...] = ()

    @model_validator(mode="after")
    def _unstable_says_why(self) -> SimResult:
        if self.stable == (self.unstable is not None):
            raise ValueError("an unstable result says why in `unstable`, a stable one leaves it None")
        return self
