"""Multi-turn sessions: `concurrency` users, each holding one conversation at a time (docs/measurement.md §2.12).

A user sends turn 1 of its conversation, reads the whole answer, waits `think_s`, then sends turn 2
with the history so far (its earlier messages and the server's actual answers, as a chat client
does), and so on; after the last turn it starts the next conversation. A failed turn ends its
conversation (a real user could not go on from an answer that never came). Each turn's intended
send time is the previous answer's end + think time, so a client late to send it shows as send lag.
Requests are numbered in the order they are sent; each record keeps its conversation and turn, and
the case reports TTFT per turn (`ttft_turn_{k}_s`): the prefill of a growing history, and what a
prefix cache saves of it.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from gpuscout.errors import SpecError
from gpuscout.loadgen.context import RunContext, WorkerPart
from gpuscout.loadgen.exchange import Live
from gpuscout.loadgen.schedule import LoadShape

Send = Callable[[Any, Live], Awaitable[None]]
Finish = Callable[[Any, list["asyncio.Task[None]"], float | None], Awaitable[None]]


async def run_sessions(ctx: RunContext, workload: Any, shape: LoadShape, planned: int, deadline: float | None,
                       send: Send, finish: Finish, part: WorkerPart | None) -> None:
    """`shape.concurrency` users through the workload's conversations until `planned` turns were sent."""
    conversations: tuple[tuple[int, ...], ...] = getattr(workload, "conversations", ())
    if not conversations:
        raise SpecError("The sessions shape needs conversations.", "Each user sends the turns of one conversation.",
                        "Build the workload with --turns (synthetic) or a ShareGPT file with --multi-turn.")
    counter = itertools.count()
    next_index = part.next_index if part is not None and part.next_index is not None else lambda: next(counter)
    mine = [c for c in range(len(conversations)) if part is None or c % part.of == part.share] or [0]
    order: Iterator[int] = itertools.cycle(mine)
    # Session ids unique across --workers processes: process s of n numbers its k-th session k·n + s.
    share, of = (part.share, part.of) if part is not None else (0, 1)
    sessions = (k * of + share for k in itertools.count())

    async def user() -> None:
        while True:
            if not await _conversation(ctx, conversations[next(order)], next(sessions), shape.think_s, planned,
                                       deadline, next_index, send):
                return

    await finish(ctx, [asyncio.create_task(user()) for _ in range(shape.concurrency or 1)], deadline)


async def _conversation(ctx: RunContext, turns: tuple[int, ...], session: int, think_s: float, planned: int,
                        deadline: float | None, next_index: Callable[[], int], send: Send) -> bool:
    """One conversation; False when the level is done (its turns or its time ran out)."""
    history: list[dict[str, str]] = []
    intended = time.perf_counter()
    for turn, prompt in enumerate(turns, start=1):
        if turn > 1 and think_s:
            await asyncio.sleep(max(0.0, intended - time.perf_counter()))
        if deadline is not None and time.perf_counter() >= deadline:
            return False
        index = next_index()
        if index >= planned:
            return False
        history.append({"role": "user", "content": ctx.prompts[prompt].text})
        live = Live(index, prompt, False, intended if turn > 1 else time.perf_counter(), session=session, turn=turn,
                    messages=list(history))
        ctx.lives.append(live)
        await send(ctx, live)
        answer = "".join(live.pieces)
        if live.error is not None or not answer or live.end is None:
            return True
        history.append({"role": "assistant", "content": answer})
        intended = live.end + think_s
    return True
