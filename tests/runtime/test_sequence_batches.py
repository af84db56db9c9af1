"""Stateful sequences in batches (``batch_size`` > 1), when clients leave: a request that leaves
while queued is left out of its batch; one that leaves while its batch runs leaves the batch to
the others, and a running batch whose clients have all left is cancelled, its slot freed. Either
way the sequence's next request runs after it, never beside it. The lane tells the collector
when a client leaves (``BatchCollector.left``); nothing watches each request's future."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_until

from podium.model.discovery import discover_all
from podium.runtime.loading import build_version
from podium.runtime.registry import ModelVersion
from podium.runtime.sequences import SequenceScheduler
from podium.types import SequenceRef, current_context

HELD = """
import asyncio
from podium.types import current_context
BATCHES = []
CANCELLED = []
GATE = asyncio.Event()
GATE.set()
class Model:
    async def predict(self, inputs):
        contexts = current_context.get()
        batch = [(c.sequence_id, x) for c, x in zip(contexts, inputs)]
        BATCHES.append(batch)
        try:
            if any(x < 0 for x in inputs):
                await GATE.wait()
        except asyncio.CancelledError:
            CANCELLED.append(batch)
            raise
        out = []
        for ctx, x in zip(contexts, inputs):
            ctx.state["sum"] = ctx.state.get("sum", 0) + x
            out.append(ctx.state["sum"])
        return out
"""

# a batch closes when it holds two requests (the delay is a minute)
CONFIG = "sequence_batching: true\nbatch_size: 2\nmax_batch_delay: 60000\n"


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(4, thread_name_prefix="test-seq-batches") as pool:
        yield pool


@pytest.fixture
async def mv(tmp_path: Path, executor: ThreadPoolExecutor) -> Any:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.py").write_text(HELD)
    (folder / "config.yaml").write_text(CONFIG)
    found, problems = discover_all(folder)
    assert not problems
    version = build_version(found[0], secrets={}, executor=executor)
    await version.load()
    module = model(version)
    module.GATE.clear()
    try:
        yield version
    finally:
        module.GATE.set()
        await version.close()


def model(mv: ModelVersion) -> Any:
    return sys.modules[type(mv.instance.obj).__module__]  # type: ignore[attr-defined]


def sched(mv: ModelVersion) -> SequenceScheduler:
    assert isinstance(mv.scheduler, SequenceScheduler)
    return mv.scheduler


def send(mv: ModelVersion, sid: str, x: int) -> asyncio.Task[Any]:
    return asyncio.create_task(sched(mv).infer_in(SequenceRef(id=sid), x, None))


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def left(task: asyncio.Task[Any]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.anyio
async def test_a_running_batch_whose_clients_all_left_is_cancelled_and_the_sequences_go_on(
    mv: ModelVersion,
) -> None:
    module = model(mv)
    a1, b1 = send(mv, "a", -1), send(mv, "b", -1)  # held in their batch
    await wait_until(lambda: module.BATCHES == [[("a", -1), ("b", -1)]])
    a2, b2 = send(mv, "a", 5), send(mv, "b", 7)  # each waits for its sequence's turn
    await left(a1)
    await settle()
    assert module.CANCELLED == []  # b1's client still waits for the batch
    assert len(module.BATCHES) == 1  # and a2 waits for it too: never beside a1
    assert sched(mv).statistics()["busy"] == 1
    await left(b1)  # the last client of the running batch
    await wait_until(lambda: module.CANCELLED == [[("a", -1), ("b", -1)]])
    # the cancelled batch added nothing; the next requests ran in a batch of their own
    assert [await a2, await b2] == [5, 7]
    assert module.BATCHES[1:] == [[("a", 5), ("b", 7)]]
    assert sched(mv).statistics()["busy"] == 0
    assert current_context.get() is None


@pytest.mark.anyio
async def test_a_running_batch_goes_on_for_the_clients_that_stay(mv: ModelVersion) -> None:
    module = model(mv)
    a1, b1 = send(mv, "a", -1), send(mv, "b", -2)
    await wait_until(lambda: len(module.BATCHES) == 1)
    a2 = send(mv, "a", 5)
    await left(a1)
    await settle()
    assert not a2.done() and len(module.BATCHES) == 1  # a's next waits for the batch
    module.GATE.set()
    assert await b1 == -2  # the batch ran to its end for b
    b2 = send(mv, "b", 1)
    assert [await a2, await b2] == [4, -1]  # a1's step ran (-1) before a2's: in order
    assert module.CANCELLED == []
    assert module.BATCHES == [[("a", -1), ("b", -2)], [("a", 5), ("b", 1)]]


@pytest.mark.anyio
async def test_a_request_that_left_while_queued_is_left_out_of_its_batch(
    mv: ModelVersion,
) -> None:
    module = model(mv)
    a1 = send(mv, "a", 1)  # queued: its batch is not full
    await wait_until(lambda: sched(mv).statistics()["queued"] == 1)
    await left(a1)
    b1, c1 = send(mv, "b", 2), send(mv, "c", 3)
    assert [await b1, await c1] == [2, 3]
    assert module.BATCHES == [[("b", 2), ("c", 3)]]
    a2, d1 = send(mv, "a", 10), send(mv, "d", 4)  # a's next request runs: nothing of a1 did
    assert [await a2, await d1] == [10, 4]
