"""Production-like traffic against the fake server, each checked against what the server recorded.

* shared prefixes: the cache hits the client reports (usage cached_tokens) are the server's, the
  first request of each group misses, the control (no shared prefix) hits nothing, and the TTFT the
  cache saves is the prefill time the server skipped;
* conversations: each turn carries the history (the server saw the previous answer in the prompt),
  is sent think time after the previous answer, and is reported per turn;
* a Mooncake trace: requests are sent on the trace's clock (divided by the speed-up) and share the
  prompt blocks the trace says they share;
* ShareGPT files: first human turns, or whole conversations.
"""

from __future__ import annotations

import itertools
import json
import statistics
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeConfig, serve_in_thread

from gpuscout import api
from gpuscout.cost.load_cost import price_load_cases
from gpuscout.loadgen.client import run_load_sync
from gpuscout.loadgen.metrics import summarize_load
from gpuscout.loadgen.plan import make_plan, shape_at
from gpuscout.loadgen.schedule import LoadShape
from gpuscout.loadgen.trace import trace_workload
from gpuscout.loadgen.traffic import conversation_workload, shared_prefix_workload, sharegpt_workload

PREFILL_S = 0.0005  # the fake's prefill per prompt word it did not find in its cache
CAUSALITY_EPS_S = 0.0001  # clock reads on different cores; causality itself leaves no slack
EARLY_TOL_S = 0.0005  # the fake never answers before its deadline (the loop's timers round up)


def metric(case: Any, name: str) -> Any:
    return {m.name: m for m in case.metrics}[name]


def test_shared_prefix_prompts_share_exactly_their_groups_prefix() -> None:
    work = shared_prefix_workload(6, prompt_tokens=40, output_tokens=4, prefix_share=0.5, groups=2, seed=3)
    control = shared_prefix_workload(6, prompt_tokens=40, output_tokens=4, prefix_share=0.5, groups=2, seed=3,
                                     unshared=True)
    words = [p.text.split() for p in work.prompts]
    assert all(len(w) == 40 and p.prefix_tokens == 20 for w, p in zip(words, work.prompts, strict=True))
    assert words[0][:20] == words[2][:20] == words[4][:20] != words[1][:20]  # groups taken in turn
    assert len({tuple(w[20:]) for w in words}) == 6  # each keeps a tail of its own
    assert [len(p.text.split()) for p in control.prompts] == [40] * 6
    assert len({tuple(p.text.split()[:20]) for p in control.prompts}) == 6 and control.prompts[0].prefix_tokens == 0


def test_prefix_cache_hits_and_savings_are_the_servers() -> None:
    config = FakeConfig(ttft_s=0.005, token_delay_s=0.001, prefix_cache=True, cache_block=16,
                        prefill_s_per_token=PREFILL_S)
    with serve_in_thread(config) as server:
        plan = make_plan(url=server.url, model="m", concurrency=1, requests=24, prompt_tokens=64, output_tokens=4,
                         prefix_share=0.75, prefix_groups=2, prefix_control=True, runs=1, api_key_env=None,
                         metrics_url=f"{server.url}/metrics", percentile=50)
        report = api.load(plan)
        records = list(server.records)
    shared, control = report.result.cases
    assert control.name == shared.name + ", no shared prefix"
    served_shared, served_control = records[:24], records[24:]
    for case, served in ((shared, served_shared), (control, served_control)):
        expected = sum(s.cached_tokens for s in served) / sum(s.prompt_tokens for s in served)
        assert metric(case, "prefix_cache_hit_rate").value == pytest.approx(expected)
        assert metric(case, "server_prefix_cache_hit_rate").value == pytest.approx(expected)  # /metrics agrees
    assert [s.cached_tokens for s in served_shared[:2]] == [0, 0]  # each group's first request is cold
    assert {s.cached_tokens for s in served_shared[2:]} == {48}  # then its 48-word prefix, three blocks
    assert {s.cached_tokens for s in served_control} == {0}
    # The TTFT the cache saves is the prefill the server skipped (its own record), within the client's stamps.
    # One request at a time, so the server's records are in the client's order. Held to the server's stamps
    # and to the legs measured here, not to the injected delays (a busy machine stretches both sides).
    saved: dict[str, float] = {}
    for case, served in ((shared, served_shared), (control, served_control)):
        server_ttft = [s.writes_s[0] - s.received_s for s in served]
        for s, ttft in zip(served, server_ttft, strict=True):  # the server never answers before its prefill
            assert ttft >= 0.005 + PREFILL_S * (s.prompt_tokens - s.cached_tokens) - EARLY_TOL_S, (ttft, s)
        client_ttft = list(metric(case, "ttft_s").samples)
        legs = [c - s for c, s in zip(client_ttft, server_ttft, strict=True)]  # send and first-chunk legs
        assert min(legs) >= -CAUSALITY_EPS_S, "the client stamped a first token before the server wrote it"
        p50_client, p50_server = metric(case, "ttft_s").summary.p50, statistics.median(server_ttft)
        assert p50_server + min(legs) - 1e-9 <= p50_client <= p50_server + max(legs) + 1e-9
        saved[case.name] = p50_client
        saved["server " + case.name] = p50_server
    print(f"\nTTFT saved by the cache: client {(saved[control.name] - saved[shared.name]) * 1e3:.2f} ms, server "
          f"{(saved['server ' + control.name] - saved['server ' + shared.name]) * 1e3:.2f} ms "
          f"(prefill skipped {48 * PREFILL_S * 1e3:g} ms)")
    costs = price_load_cases(report.result.cases, 3.6)
    assert costs[0].prefix_saving_usd_per_1m_output_tokens is not None
    assert costs[0].prefix_saving_usd_per_1m_output_tokens > 0
    assert costs[0].prefix_cache_hit_rate == pytest.approx(metric(shared, "prefix_cache_hit_rate").value)


def test_conversation_turns_carry_their_history_after_think_time() -> None:
    think = 0.03
    work = conversation_workload(6, turns=3, prompt_tokens=20, output_tokens=4)
    shape = LoadShape(kind="sessions", concurrency=2, requests=12, think_s=think)
    with serve_in_thread(FakeConfig(ttft_s=0.005, token_delay_s=0.001, prefix_cache=True)) as server:
        run = run_load_sync(server.url, "m", work, shape, api_key_env=None)
        served = list(server.records)
        seen = [entry["body"]["messages"] for entry in server.seen]
    case = summarize_load(run, slo=None, percentile_needed=50)
    assert case.name == "2 users"
    assert {len(m) for m in seen} == {1, 3, 5}  # turn k: k user messages and the k − 1 answers between
    for messages in seen:
        assert all(m["content"] == "tok " * 4 for m in messages[1::2])  # the server's own answers, resent
    for k in (1, 2, 3):
        assert metric(case, f"ttft_turn_{k}_s").summary.n == 4
    by_session: dict[int | None, list[Any]] = {}
    for r in run.records:
        by_session.setdefault(r.session, []).append(r)
    assert len(by_session) == 4
    for turns in by_session.values():
        for before, after in itertools.pairwise(sorted(turns, key=lambda r: r.turn)):
            assert after.turn == before.turn + 1
            assert after.intended_s == pytest.approx(before.end_s + think, abs=1e-6)
            assert after.sent_s >= after.intended_s
    later = [s for s, m in zip(served, seen, strict=True) if len(m) > 1]
    assert all(s.cached_tokens > 0 for s in later)  # the history is a prefix the cache holds


def test_a_mooncake_trace_is_replayed_on_its_clock_with_its_shared_blocks(tmp_path: Path) -> None:
    lines = [{"timestamp": 0, "input_length": 700, "output_length": 4, "hash_ids": [1, 2]},
             {"timestamp": 200, "input_length": 600, "output_length": 3, "hash_ids": [1, 3]},
             {"timestamp": 200, "input_length": 300, "output_length": 2, "hash_ids": [4]},
             {"timestamp": 600, "input_length": 1000, "output_length": 4, "hash_ids": [1, 2]}]
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines))
    work = trace_workload(path, tokenizer_path=None, seed=0)
    words = [p.text.split() for p in work.prompts]
    assert [len(w) for w in words] == [700, 600, 300, 1000]
    assert words[0][:512] == words[1][:512] == words[3][:512] and words[0][:700] == words[3][:700]
    assert words[2][:100] != words[0][:100]
    assert [p.prefix_tokens for p in work.prompts] == [700, 512, 0, 1000]
    with serve_in_thread(FakeConfig(ttft_s=0.002, token_delay_s=0.001)) as server:
        plan = make_plan(url=server.url, model="m", trace=path, speedup=2.0, runs=1, api_key_env=None, percentile=50)
        report = api.load(plan)
        served = list(server.records)
    case = report.result.cases[0]
    assert case.name == "trace ×2" and metric(case, "requests_per_s").value > 0
    assert {s.prompt.split()[0] for s in served} == {w[0] for w in words}
    # The same level run directly, for its records: each request is scheduled at the trace's clock / 2 exactly,
    # sent no earlier, and the server had it no earlier than it was sent (its own stamp, on the same clock). How
    # late each one was is this machine's, and is printed, not bounded.
    shape = shape_at(plan, 2.0, len(work.prompts))
    with serve_in_thread(FakeConfig(ttft_s=0.002, token_delay_s=0.001)) as server:
        run = run_load_sync(server.url, "m", work, shape, api_key_env=None)
        by_prompt = {s.prompt: s for s in server.records}
    assert run.t0_perf_counter_s is not None and len(by_prompt) == 4
    records = sorted(run.records, key=lambda r: r.index)
    assert [r.intended_s for r in records] == pytest.approx([0.0, 0.1, 0.1, 0.3], abs=1e-9)
    late = []
    for r in records:
        received = by_prompt[work.prompts[r.index].text].received_s
        assert r.intended_s is not None and r.sent_s >= r.intended_s
        assert received >= run.t0_perf_counter_s + r.sent_s - CAUSALITY_EPS_S
        late.append(received - run.t0_perf_counter_s - r.intended_s)
    print(f"\ntrace ×2: the server had each request {', '.join(f'{x * 1e3:.1f}' for x in late)} ms after its time")


def test_sharegpt_files_give_first_turns_or_whole_conversations(tmp_path: Path) -> None:
    data = [{"id": "a", "conversations": [{"from": "human", "value": "hello there"}, {"from": "gpt", "value": "hi"},
                                          {"from": "human", "value": "how are you"}]},
            {"id": "b", "conversations": [{"from": "gpt", "value": "nobody asked"}]},
            {"id": "c", "messages": [{"role": "user", "content": "one question"}]}]
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(data))
    firsts = sharegpt_workload(path, output_tokens=4, tokenizer_path=None, seed=0, multi_turn=False)
    assert sorted(p.text for p in firsts.prompts) == ["hello there", "one question"] and not firsts.conversations
    talks = sharegpt_workload(path, output_tokens=4, tokenizer_path=None, seed=0, multi_turn=True)
    turns = sorted(tuple(talks.prompts[i].text for i in c) for c in talks.conversations)
    assert turns == [("hello there", "how are you"), ("one question",)]


def test_conversation_workload_numbers_its_turns() -> None:
    work = conversation_workload(3, turns=4, prompt_tokens=5, output_tokens=2)
    assert work.conversations == ((0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11))
    assert all(len(p.text.split()) == 5 for p in work.prompts)
