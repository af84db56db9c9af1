"""The continuous batch of one worker in the sequence scheduler (``runtime/sequences/_steps``):
requests joining and leaving between steps, the Contexts a step sees, errors, a lost worker, a
closed scheduler, back-pressure, and a reader that leaves while its step runs. With fakes: a
worker whose instance's ``step`` the test drives."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from typing import Any

import pytest
from helpers import wait_until

from podium.errors import SequenceClosed, Unavailable
from podium.runtime._scheduler import TaskSet
from podium.runtime.sequences._steps import Steps
from podium.types import Context, Generation, current_context

pytestmark = pytest.mark.anyio


class Instance:
    """Each step: records (the batch's inputs, the contexts it saw) and emits ``inputs:k`` for
    the k-th step of each request; a request whose inputs is ``n`` finishes after ``n`` steps.
    ``hold`` (when set) makes a step wait until it is released; ``fail`` makes the next raise."""

    def __init__(self) -> None:
        self.steps: list[tuple[list[Any], list[str]]] = []
        self.hold: asyncio.Event | None = None
        self.entered = asyncio.Event()
        self.fail: Exception | None = None

    async def step(self, batch: list[Generation]) -> None:
        ctxs = current_context.get()
        assert isinstance(ctxs, list) and len(ctxs) == len(batch)
        self.steps.append(([g.inputs for g in batch], [c.sequence_id for c in ctxs]))
        self.entered.set()
        await asyncio.sleep(0)  # a real step awaits its thread
        if self.hold is not None:
            await self.hold.wait()
        if self.fail is not None:
            exc, self.fail = self.fail, None
            raise exc
        for gen in batch:
            done = gen.state.setdefault("done", 0) + 1
            gen.state["done"] = done
            gen.emit(f"{gen.inputs}:{done}")
            if done >= gen.inputs:
                gen.finish()


class Worker:
    def __init__(self) -> None:
        self.instance = Instance()


class Gate:
    def __init__(self) -> None:
        self.held = 0

    def try_acquire_on(self, worker: Any) -> bool:
        self.held += 1
        return True

    def release(self, worker: Any) -> None:
        self.held -= 1


def make(limit: int = 4, buffer: int = 16) -> tuple[Steps, Worker, Gate, TaskSet]:
    worker, gate, tasks = Worker(), Gate(), TaskSet()
    steps = Steps(
        worker,
        gate,
        limit=limit,
        buffer=buffer,
        tasks=tasks,
        stopped=lambda: Unavailable("stopped"),
    )
    return steps, worker, gate, tasks


def ctx(sid: str) -> Context:
    return Context(sid, first=False, state={})


async def collect(items: AsyncGenerator[Any, None]) -> list[Any]:
    async with contextlib.aclosing(items):
        return [item async for item in items]


async def test_requests_of_several_sequences_share_each_step_and_each_gets_its_items() -> None:
    steps, worker, gate, tasks = make()
    a, b = await asyncio.gather(
        collect(steps.stream(ctx("s1"), 2, None)), collect(steps.stream(ctx("s2"), 3, None))
    )
    assert a == ["2:1", "2:2"] and b == ["3:1", "3:2", "3:3"]
    assert worker.instance.steps == [
        ([2, 3], ["s1", "s2"]),
        ([2, 3], ["s1", "s2"]),
        ([3], ["s2"]),
    ]
    await wait_until(lambda: not tasks._tasks)  # idle: the loop's task ended, its slot went back
    assert gate.held == 0 and steps.stats.steps == 3


async def test_a_request_that_joins_while_another_streams_shares_its_next_step() -> None:
    steps, worker, _, _ = make()
    long = steps.stream(ctx("s"), 4, None)
    assert await anext(long) == "4:1"
    joined = asyncio.create_task(collect(steps.stream(ctx("s"), 1, None)))  # same sequence
    rest = [item async for item in long]
    assert rest == ["4:2", "4:3", "4:4"] and await joined == ["1:1"]
    # the second request joined a step of the first, both with their sequence's Context
    assert ([4, 1], ["s", "s"]) in worker.instance.steps


async def test_a_reader_that_leaves_is_out_before_the_next_step() -> None:
    steps, worker, _, _ = make()
    leaving = steps.stream(ctx("a"), 10, None)
    staying = asyncio.create_task(collect(steps.stream(ctx("b"), 3, None)))
    assert await anext(leaving) == "10:1"
    await leaving.aclose()
    assert await staying == ["3:1", "3:2", "3:3"]
    # out before the next step: at most the step running as it left still had it
    assert [inputs for inputs, _ in worker.instance.steps][-1] == [3]
    assert sum(10 in inputs for inputs, _ in worker.instance.steps) <= 2


async def test_a_reader_that_leaves_while_its_step_runs_gets_nothing_more() -> None:
    steps, worker, _, _ = make()
    worker.instance.hold = asyncio.Event()
    items = steps.stream(ctx("a"), 5, None)
    first = asyncio.create_task(anext(items))
    await worker.instance.entered.wait()  # its step is running
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    await items.aclose()
    worker.instance.hold.set()
    await wait_until(lambda: steps.stats.steps == 1 and not steps.waiting)
    other = await collect(steps.stream(ctx("b"), 1, None))
    assert other == ["1:1"] and [i for i, _ in worker.instance.steps] == [[5], [1]]


async def test_at_most_limit_requests_step_together_and_the_others_wait_in_order() -> None:
    steps, worker, _, _ = make(limit=2)
    results = await asyncio.gather(
        *(collect(steps.stream(ctx(f"s{i}"), 1, None)) for i in range(5))
    )
    assert results == [["1:1"]] * 5
    assert [sids for _, sids in worker.instance.steps] == [["s0", "s1"], ["s2", "s3"], ["s4"]]


async def test_a_failing_step_fails_its_requests_and_the_next_ones_run() -> None:
    steps, worker, _, _ = make()
    worker.instance.fail = ValueError("boom")
    got = await asyncio.gather(
        collect(steps.stream(ctx("a"), 2, None)),
        collect(steps.stream(ctx("b"), 2, None)),
        return_exceptions=True,
    )
    assert [type(g) for g in got] == [ValueError, ValueError]
    assert await collect(steps.stream(ctx("c"), 1, None)) == ["1:1"]


async def test_a_lost_worker_ends_every_request_and_refuses_new_ones() -> None:
    steps, worker, _, _ = make()
    worker.instance.hold = asyncio.Event()
    items = steps.stream(ctx("a"), 10, None)
    waiting = asyncio.create_task(anext(items))
    await worker.instance.entered.wait()  # its first step is running
    steps.lose(lambda c: SequenceClosed(f"sequence '{c.sequence_id}' lost its worker"))
    with pytest.raises(SequenceClosed, match="'a' lost its worker"):
        await waiting
    worker.instance.hold.set()
    with pytest.raises(SequenceClosed, match="'b' lost its worker"):
        await collect(steps.stream(ctx("b"), 1, None))


async def test_closing_the_scheduler_ends_the_requests_with_its_error() -> None:
    steps, worker, gate, tasks = make()
    worker.instance.hold = asyncio.Event()
    reader = asyncio.create_task(collect(steps.stream(ctx("a"), 3, None)))
    await worker.instance.entered.wait()
    await tasks.cancel()  # what SequenceScheduler.close does
    with pytest.raises(Unavailable, match="stopped"):
        await reader
    assert gate.held == 0


async def test_a_request_whose_buffer_is_full_sits_out_until_it_is_read() -> None:
    steps, worker, _, _ = make(buffer=2)
    slow = steps.stream(ctx("slow"), 6, None)
    assert await anext(slow) == "6:1"
    fast = await collect(steps.stream(ctx("fast"), 5, None))
    assert fast == [f"5:{i}" for i in range(1, 6)]
    # the unread one stepped until its buffer held 2 items, then sat out
    stepped = sum(6 in inputs for inputs, _ in worker.instance.steps)
    assert stepped <= 4
    assert [item async for item in slow] == [f"6:{i}" for i in range(2, 7)]
