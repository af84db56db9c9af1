"""A thread worker of a plain sync predict takes requests queued ahead of its predict threads
(runtime/_thread_worker.py, queue_ahead): predict_concurrency stays the bound of predicts at once,
on the same threads, and a request whose client left before its predict started never runs.

A sync batched predict takes one batch ahead per predict thread: a thread starts the next batch
the moment the one before returns, without the event loop handing it on (with predict_concurrency
2, two batches run, two more wait at the worker, and the collector forms a fifth); a batch queued
ahead whose clients all left never runs; response_timeout counts from a batch's start; a batch
queued behind a stuck predict goes to the worker that replaces it; its requests count against
max_queue_size until it starts."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_until

from podium.errors import QueueFull, ResponseTimeout
from podium.model.discovery import discover_all
from podium.runtime._worker import QUEUE_AHEAD
from podium.runtime.loading import build_version
from podium.runtime.registry import ModelVersion

CODE = """
import threading

HOLD = threading.Event()
GATES = {name: threading.Event() for name in ("g1", "g2")}  # a batch holding one waits for it
LOCK = threading.Lock()
RAN = []
THREADS = set()
RUNNING = [0, 0]


class Model:
    def predict(self, inputs):  # a batch (a list), with batch_size
        with LOCK:
            RUNNING[0] += 1
            RUNNING[1] = max(RUNNING)
            RAN.append(inputs)
            THREADS.add(threading.get_ident())
        items = inputs if isinstance(inputs, list) else [inputs]
        if "hold" in items:
            assert HOLD.wait(5)
        for name in items:
            if name in GATES:
                assert GATES[name].wait(5)
        slow = [i for i in items if isinstance(i, str) and i.startswith("x")]
        if slow:  # SLOW: 1 µs per character (of a batch's first)
            threading.Event().wait(len(slow[0]) / 1e6)
        threading.Event().wait(0.0002)  # a real wait: another thread could come in
        with LOCK:
            RUNNING[0] -= 1
        return inputs
"""

BATCHED = "batch_size: 2\nmax_batch_delay: 60000\n"  # a batch closes when full


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(8, thread_name_prefix="test-ahead") as pool:
        yield pool


def version(tmp_path: Path, config: str, executor: ThreadPoolExecutor) -> ModelVersion:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.py").write_text(CODE)
    (folder / "config.yaml").write_text(config)
    found, problems = discover_all(folder)
    assert not problems
    return build_version(found[0], secrets={}, executor=executor)


def module(mv: ModelVersion) -> Any:
    return sys.modules[type(mv.instance.obj).__module__]  # type: ignore[attr-defined]


@contextlib.asynccontextmanager
async def started(
    tmp_path: Path, config: str, executor: ThreadPoolExecutor
) -> AsyncIterator[tuple[ModelVersion, Any]]:
    """The test model under ``config``, its workers started: (version, model module). On the
    way out every held predict is let go and the version closed."""
    mv = version(tmp_path, config, executor)
    mod = module(mv)
    await mv.pool.start()  # type: ignore[union-attr]
    try:
        yield mv, mod
    finally:
        mod.HOLD.set()
        for gate in mod.GATES.values():
            gate.set()
        await mv.scheduler.close()


@pytest.mark.anyio
@pytest.mark.parametrize("slots", [1, 2])
async def test_requests_ahead_keep_predict_concurrency(
    tmp_path: Path, executor: ThreadPoolExecutor, slots: int
) -> None:
    async with started(
        tmp_path, f"response_timeout: 0\npredict_concurrency: {slots}\n", executor
    ) as (mv, mod):
        stats = mv.scheduler.statistics()
        assert stats["slots"] == slots + max(QUEUE_AHEAD, slots)  # slots, and those ahead
        results = await asyncio.gather(*(mv.scheduler.infer(i, None) for i in range(60)))
        assert results == list(range(60))
        assert mod.RUNNING[1] == slots  # never more at once
        assert len(mod.THREADS) == slots  # and always on the same threads
        assert threading.get_ident() not in mod.THREADS


@pytest.mark.anyio
async def test_a_request_ahead_whose_client_left_never_runs(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    async with started(tmp_path, "response_timeout: 0\n", executor) as (mv, mod):
        held = asyncio.create_task(mv.scheduler.infer("hold", None))
        await wait_until(lambda: mod.RAN == ["hold"])
        gone = asyncio.create_task(mv.scheduler.infer("gone", None))
        after = asyncio.create_task(mv.scheduler.infer("after", None))
        await wait_until(lambda: mv.scheduler.statistics()["busy"] == 3)  # taken ahead
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone  # at once: its predict had not started
        assert mv.scheduler.statistics()["busy"] == 2
        mod.HOLD.set()
        assert (await held, await after) == ("hold", "after")
        assert mod.RAN == ["hold", "after"]


@pytest.mark.anyio
@pytest.mark.parametrize("batch", [False, True])
async def test_response_timeout_counts_from_the_predicts_start_not_the_wait_ahead(
    tmp_path: Path, executor: ThreadPoolExecutor, batch: bool
) -> None:
    # two predicts (of a request, or of a batch) of 0.6 s one after the other, at
    # response_timeout 1: the second waits 0.6 s queued ahead, then runs 0.6 s; timed from its
    # arrival it would fail
    config = (BATCHED if batch else "") + "response_timeout: 1\n"
    async with started(tmp_path, config, executor) as (mv, mod):
        ahead = 1 if batch else QUEUE_AHEAD
        assert mv.scheduler.statistics()["slots"] == 1 + ahead  # taken ahead, timed
        slow = "x" * 600_000  # see SLOW: 0.6 s
        running, queued = ((slow, "a"), (slow, "b")) if batch else ((slow,), (slow,))
        first, second = await running_and_ahead(mv, mod, running, queued)
        assert [await t for t in first + second] == [*running, *queued]
        assert mod.RUNNING[1] == 1


@pytest.mark.anyio
async def test_requests_ahead_count_against_max_queue_size(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    async with started(tmp_path, "response_timeout: 0\nmax_queue_size: 2\n", executor) as (mv, mod):
        assert mv.scheduler.statistics()["slots"] == 1 + 2  # ahead: no more than may wait
        held = asyncio.create_task(mv.scheduler.infer("hold", None))
        await wait_until(lambda: mod.RAN == ["hold"])
        ahead = [asyncio.create_task(mv.scheduler.infer(i, None)) for i in range(2)]
        await wait_until(lambda: mv.scheduler.statistics()["busy"] == 3)
        with pytest.raises(QueueFull):  # two wait already, ahead of the predict thread
            await mv.scheduler.infer("third", None)
        mod.HOLD.set()
        assert (await held, *[await a for a in ahead]) == ("hold", 0, 1)


# -- batches ahead -------------------------------------------------------------------------


def batched(
    tmp_path: Path, config: str, executor: ThreadPoolExecutor
) -> contextlib.AbstractAsyncContextManager[tuple[ModelVersion, Any]]:
    """The batched test model (batches of 2) under ``config``: :func:`started`."""
    return started(tmp_path, BATCHED + config, executor)


def infer(mv: ModelVersion, *items: str) -> list[asyncio.Task[Any]]:
    return [asyncio.create_task(mv.scheduler.infer(item, None)) for item in items]


def busy(mv: ModelVersion) -> int:
    return mv.scheduler.statistics()["busy"]


async def running_and_ahead(
    mv: ModelVersion, mod: Any, running: tuple[str, str], ahead: tuple[str, str]
) -> tuple[list[asyncio.Task[Any]], list[asyncio.Task[Any]]]:
    """The requests of ``running`` as a batch whose predict has started, and those of ``ahead``
    as a (full) batch queued at the worker behind it: their tasks."""
    first = infer(mv, *running)
    await wait_until(lambda: len(mod.RAN) == 1)
    queued = infer(mv, *ahead)
    await wait_until(lambda: busy(mv) == 2, what="a batch queued at the worker")
    return first, queued


def started_without_the_loop(mod: Any, batches: int) -> None:
    """Block the event loop (on purpose) until the model has started ``batches`` batches: only
    the model's own thread can start one meanwhile. A safety net of 5 s, not a timing."""
    limit = time.monotonic() + 5
    while len(mod.RAN) < batches and time.monotonic() < limit:
        time.sleep(0.001)


@pytest.mark.anyio
async def test_the_thread_starts_the_next_batch_without_the_loop_handing_it_on(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    async with batched(tmp_path, "response_timeout: 0\n", executor) as (mv, mod):
        assert mv.scheduler.statistics()["slots"] == 1 + 1  # its predict thread, one ahead
        first, second = await running_and_ahead(mv, mod, ("hold", "a"), ("b", "c"))
        mod.HOLD.set()
        started_without_the_loop(mod, 2)  # the loop has not turned since the release
        assert mod.RAN == [["hold", "a"], ["b", "c"]]
        assert [await t for t in first + second] == ["hold", "a", "b", "c"]
        assert mod.RUNNING[1] == 1  # predict_concurrency: one batch at a time
        assert len(mod.THREADS) == 1  # on the same thread


@pytest.mark.anyio
async def test_arrivals_join_the_batch_formed_behind_the_one_queued_ahead(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    async with batched(tmp_path, "response_timeout: 0\n", executor) as (mv, mod):
        first, ahead = await running_and_ahead(mv, mod, ("hold", "a"), ("b", "c"))
        behind = infer(mv, "d")  # the batch formed behind it waits for a slot...
        await wait_until(lambda: mv.scheduler.statistics()["queued"] == 2 + 1)
        behind += infer(mv, "e")  # ...and arrivals join it
        mod.HOLD.set()
        results = [await t for t in first + ahead + behind]
        assert results == ["hold", "a", "b", "c", "d", "e"]
        assert mod.RAN == [["hold", "a"], ["b", "c"], ["d", "e"]]


@pytest.mark.anyio
async def test_a_batch_queued_ahead_whose_clients_all_left_never_runs(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    async with batched(tmp_path, "response_timeout: 0\n", executor) as (mv, mod):
        first, gone = await running_and_ahead(mv, mod, ("hold", "a"), ("b", "c"))
        for task in gone:
            task.cancel()
        for task in gone:
            with pytest.raises(asyncio.CancelledError):
                await task  # at once: its predict had not started
        await wait_until(lambda: busy(mv) == 1, what="its place given back")
        assert mv.scheduler.statistics()["queued"] == 0  # nor counted as waiting
        after = infer(mv, "d", "e")
        mod.HOLD.set()
        assert [await t for t in first + after] == ["hold", "a", "d", "e"]
        assert mod.RAN == [["hold", "a"], ["d", "e"]]


@pytest.mark.anyio
async def test_a_batch_queued_ahead_counts_against_max_queue_size_until_it_starts(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    async with batched(tmp_path, "response_timeout: 0\nmax_queue_size: 2\n", executor) as (mv, mod):
        first, ahead = await running_and_ahead(mv, mod, ("hold", "a"), ("b", "c"))
        assert mv.scheduler.statistics()["queued"] == 2
        with pytest.raises(QueueFull):
            await mv.scheduler.infer("d", None)
        mod.HOLD.set()
        assert [await t for t in first] == ["hold", "a"]  # "b", "c" started: room again
        assert mv.scheduler.statistics()["queued"] == 0
        behind = infer(mv, "e", "f")
        assert [await t for t in ahead + behind] == ["b", "c", "e", "f"]
        assert mod.RAN == [["hold", "a"], ["b", "c"], ["e", "f"]]


@pytest.mark.anyio
@pytest.mark.parametrize("batch", [False, True])
async def test_requests_ahead_of_a_stuck_predict_go_to_the_replacement_worker(
    tmp_path: Path, executor: ThreadPoolExecutor, batch: bool
) -> None:
    # a request queued ahead, or a batch (then back to the front of the batch queue: Moved)
    config = (BATCHED if batch else "") + "response_timeout: 0.3\n"
    running, ahead = (("hold", "a"), ("b", "c")) if batch else (("hold",), ("after",))
    async with started(tmp_path, config, executor) as (mv, mod):
        held, after = await running_and_ahead(mv, mod, running, ahead)
        for task in held:
            with pytest.raises(ResponseTimeout):
                await task  # its thread runs on, past the timeout
        # what was ahead never ran behind it: taken back, it ran on the worker that replaced
        # the stuck one (on another thread), while "hold" still runs
        assert [await t for t in after] == list(ahead)
        assert mod.RAN == ([list(running), list(ahead)] if batch else [*running, *ahead])
        assert len(mod.THREADS) == 2
        assert not mod.HOLD.is_set()


@pytest.mark.anyio
async def test_no_batch_ahead_with_a_queue_policy(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    # with max_queue_delay, a batch waits in the collector, where its requests' deadlines hold
    config = "response_timeout: 0\nmax_queue_delay: 10000\n"
    async with batched(tmp_path, config, executor) as (mv, mod):
        assert mv.scheduler.statistics()["slots"] == 1


# -- a batch ahead per predict thread (predict_concurrency > 1) ------------------------------

TWO = "response_timeout: 0\npredict_concurrency: 2\n"


def queued(mv: ModelVersion) -> int:
    return mv.scheduler.statistics()["queued"]


async def two_running_two_ahead(
    mv: ModelVersion, mod: Any
) -> tuple[list[asyncio.Task[Any]], list[asyncio.Task[Any]], list[asyncio.Task[Any]]]:
    """Two batches running (held by the gates g1, g2), two full batches queued at the worker
    behind them, and a fifth formed in the collector, waiting for a place: their tasks."""
    running = infer(mv, "g1", "a") + infer(mv, "g2", "b")
    await wait_until(lambda: mod.RUNNING[0] == 2, what="two batches running at once")
    ahead = infer(mv, "c", "d") + infer(mv, "e", "f")
    await wait_until(lambda: busy(mv) == 4, what="a batch queued at the worker per thread")
    behind = infer(mv, "g", "h")
    await wait_until(lambda: queued(mv) == 2 + 2 + 2, what="the fifth batch formed")
    assert len(mod.RAN) == 2
    return running, ahead, behind


@pytest.mark.anyio
async def test_each_predict_thread_has_a_batch_queued_ahead(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    async with batched(tmp_path, TWO, executor) as (mv, mod):
        assert mv.scheduler.statistics()["slots"] == 2 + 2  # its two threads, a batch ahead each
        running, ahead, behind = await two_running_two_ahead(mv, mod)
        mod.GATES["g1"].set()
        mod.GATES["g2"].set()
        started_without_the_loop(mod, 4)  # the loop has not turned since the release
        # both threads took the next batch themselves, the oldest first
        assert mod.RAN[2:] == [["c", "d"], ["e", "f"]]
        results = [await t for t in running + ahead + behind]
        assert results == ["g1", "a", "g2", "b", "c", "d", "e", "f", "g", "h"]
        assert mod.RAN[4:] == [["g", "h"]]
        assert mod.RUNNING[1] == 2  # predict_concurrency: never more than two batches at once
        assert len(mod.THREADS) == 2
        assert queued(mv) == 0


@pytest.mark.anyio
async def test_a_thread_that_ends_takes_the_oldest_batch_ahead_and_the_next_takes_its_place(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    async with batched(tmp_path, TWO, executor) as (mv, mod):
        running, ahead, behind = await two_running_two_ahead(mv, mod)
        # One thread ends: it starts ("c", "d"), the oldest ahead, and the fifth batch takes
        # the place freed; that thread then runs ("e", "f") and ("g", "h") in turn. (It runs
        # them without waiting for the loop, so the states in between are not waited for: on
        # a loaded machine they can pass before the loop looks.)
        mod.GATES["g1"].set()
        assert [await t for t in running[:2]] == ["g1", "a"]
        assert [await t for t in ahead + behind] == ["c", "d", "e", "f", "g", "h"]
        assert mod.RAN[2:] == [["c", "d"], ["e", "f"], ["g", "h"]]
        assert not running[2].done()  # all the while, g2's batch held the other thread
        mod.GATES["g2"].set()
        assert [await t for t in running[2:]] == ["g2", "b"]
        assert mod.RUNNING[1] == 2
        assert queued(mv) == 0


@pytest.mark.anyio
async def test_a_batch_ahead_whose_clients_left_never_runs_and_the_one_behind_it_does(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    async with batched(tmp_path, TWO, executor) as (mv, mod):
        running, ahead, behind = await two_running_two_ahead(mv, mod)
        for task in ahead[:2]:  # the first batch queued at the worker
            task.cancel()
        for task in ahead[:2]:
            with pytest.raises(asyncio.CancelledError):
                await task  # at once: its predict had not started
        # its place went to the batch formed behind: ("e", "f") and ("g", "h") wait there
        await wait_until(lambda: busy(mv) == 4 and queued(mv) == 2 + 2)
        mod.GATES["g1"].set()
        mod.GATES["g2"].set()
        results = [await t for t in running + ahead[2:] + behind]
        assert results == ["g1", "a", "g2", "b", "e", "f", "g", "h"]
        assert mod.RAN[2:] == [["e", "f"], ["g", "h"]]  # ("c", "d") never ran
        assert queued(mv) == 0


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("config", "ahead"),
    [
        ("predict_concurrency: 3\n", 3),  # a batch for each thread
        ("predict_concurrency: 3\nmax_queue_size: 2\n", 2),  # never more than the queue holds
        ("predict_concurrency: 2\nmax_queue_delay: 10000\n", 0),  # a queue policy: none
    ],
)
async def test_batches_ahead_one_per_thread_within_the_queue_bound(
    tmp_path: Path, executor: ThreadPoolExecutor, config: str, ahead: int
) -> None:
    async with batched(tmp_path, "response_timeout: 0\n" + config, executor) as (mv, _):
        threads = mv.config.predict_concurrency
        assert mv.scheduler.statistics()["slots"] == threads + ahead
