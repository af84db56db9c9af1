"""A thread worker of a sync batched predict takes one batch queued ahead of its predict thread
(runtime/_worker.py ``queue_ahead``, runtime/_thread_worker.py ``worker_ahead``): the thread starts
the next batch the moment the one before returns, without the event loop handing it on; a batch
queued ahead whose clients all left never runs; response_timeout counts from a batch's start;
a batch queued behind a stuck predict goes to the worker that replaces it."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_until

from podium.errors import QueueFull, ResponseTimeout
from podium.model.discovery import discover_all
from podium.runtime.loading import build_version
from podium.runtime.registry import ModelVersion

CODE = """
import threading

HOLD = threading.Event()
LOCK = threading.Lock()
STARTED = []  # each batch, as its predict starts
THREADS = set()
RUNNING = [0, 0]


class Model:
    def predict(self, inputs):
        with LOCK:
            RUNNING[0] += 1
            RUNNING[1] = max(RUNNING)
            STARTED.append(list(inputs))
            THREADS.add(threading.get_ident())
        if "hold" in inputs:
            assert HOLD.wait(5)
        slow = [i for i in inputs if i.startswith("x")]
        if slow:  # SLOW: 1 µs per character of the first
            threading.Event().wait(len(slow[0]) / 1e6)
        with LOCK:
            RUNNING[0] -= 1
        return list(inputs)
"""

BATCHED = "batch_size: 2\nmax_batch_delay: 60000\n"  # a batch closes when full


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(8, thread_name_prefix="test-batch-ahead") as pool:
        yield pool


@contextlib.asynccontextmanager
async def started(
    tmp_path: Path, config: str, executor: ThreadPoolExecutor
) -> AsyncIterator[tuple[ModelVersion, Any]]:
    """The test model under ``config``, its workers started: (version, model module). On the
    way out every held predict is let go and the version closed."""
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.py").write_text(CODE)
    (folder / "config.yaml").write_text(BATCHED + config)
    found, problems = discover_all(folder)
    assert not problems
    mv = build_version(found[0], secrets={}, executor=executor)
    mod = sys.modules[type(mv.instance.obj).__module__]  # type: ignore[attr-defined]
    await mv.pool.start()  # type: ignore[union-attr]
    try:
        yield mv, mod
    finally:
        mod.HOLD.set()
        await mv.scheduler.close()


def infer(mv: ModelVersion, *items: str) -> list[asyncio.Task[Any]]:
    return [asyncio.create_task(mv.scheduler.infer(item, None)) for item in items]


def busy(mv: ModelVersion) -> int:
    return mv.scheduler.statistics()["busy"]


def started_without_the_loop(mod: Any, batches: int) -> None:
    """Block the event loop (on purpose) until the model has started ``batches`` batches: only
    the model's own thread can start one meanwhile. A safety net of 5 s, not a timing."""
    limit = time.monotonic() + 5
    while len(mod.STARTED) < batches and time.monotonic() < limit:
        time.sleep(0.001)


@pytest.mark.anyio
async def test_the_thread_starts_the_next_batch_without_the_loop_handing_it_on(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    async with started(tmp_path, "response_timeout: 0\n", executor) as (mv, mod):
        assert mv.scheduler.statistics()["slots"] == 1 + 1  # its predict thread, one ahead
        first = infer(mv, "hold", "a")
        await wait_until(lambda: mod.STARTED == [["hold", "a"]])
        second = infer(mv, "b", "c")
        await wait_until(lambda: busy(mv) == 2, what="the second batch queued at the worker")
        mod.HOLD.set()
        started_without_the_loop(mod, 2)  # the loop has not turned since the release
        assert mod.STARTED == [["hold", "a"], ["b", "c"]]
        assert [await t for t in first + second] == ["hold", "a", "b", "c"]
        assert mod.RUNNING[1] == 1  # predict_concurrency: one batch at a time
        assert len(mod.THREADS) == 1  # on the same thread


@pytest.mark.anyio
async def test_arrivals_join_the_batch_formed_behind_the_one_queued_ahead(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    async with started(tmp_path, "response_timeout: 0\n", executor) as (mv, mod):
        first = infer(mv, "hold", "a")
        await wait_until(lambda: mod.STARTED == [["hold", "a"]])
        ahead = infer(mv, "b", "c")  # full: queued at the worker
        await wait_until(lambda: busy(mv) == 2)
        behind = infer(mv, "d")  # the batch formed behind it waits for a slot...
        await wait_until(lambda: mv.scheduler.statistics()["queued"] == 2 + 1)
        behind += infer(mv, "e")  # ...and arrivals join it
        mod.HOLD.set()
        results = [await t for t in first + ahead + behind]
        assert results == ["hold", "a", "b", "c", "d", "e"]
        assert mod.STARTED == [["hold", "a"], ["b", "c"], ["d", "e"]]


@pytest.mark.anyio
async def test_a_batch_queued_ahead_whose_clients_all_left_never_runs(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    async with started(tmp_path, "response_timeout: 0\n", executor) as (mv, mod):
        first = infer(mv, "hold", "a")
        await wait_until(lambda: mod.STARTED == [["hold", "a"]])
        gone = infer(mv, "b", "c")
        await wait_until(lambda: busy(mv) == 2)  # queued at the worker
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
        assert mod.STARTED == [["hold", "a"], ["d", "e"]]


@pytest.mark.anyio
async def test_response_timeout_counts_from_the_batchs_start_not_its_wait_ahead(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    # two batches of 0.6 s one after the other, at response_timeout 1: the second waits 0.6 s
    # queued at the worker, then runs 0.6 s; timed from when it was queued it would fail
    async with started(tmp_path, "response_timeout: 1\n", executor) as (mv, mod):
        slow = "x" * 600_000  # see SLOW: 0.6 s
        first = infer(mv, slow, "a")
        await wait_until(lambda: len(mod.STARTED) == 1)
        second = infer(mv, slow, "b")
        await wait_until(lambda: busy(mv) == 2)  # queued ahead
        assert [await t for t in first + second] == [slow, "a", slow, "b"]
        assert mod.RUNNING[1] == 1


@pytest.mark.anyio
async def test_a_batch_queued_behind_a_stuck_predict_goes_to_the_replacement_worker(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    async with started(tmp_path, "response_timeout: 0.3\n", executor) as (mv, mod):
        held = infer(mv, "hold", "a")
        await wait_until(lambda: mod.STARTED == [["hold", "a"]])
        after = infer(mv, "b", "c")
        await wait_until(lambda: busy(mv) == 2)  # queued ahead
        for task in held:
            with pytest.raises(ResponseTimeout):
                await task  # its thread runs on, past the timeout
        # the batch never ran behind it: taken back, it ran on the worker that replaced the
        # stuck one (on another thread), while "hold" still runs
        assert [await t for t in after] == ["b", "c"]
        assert mod.STARTED == [["hold", "a"], ["b", "c"]]
        assert len(mod.THREADS) == 2
        assert not mod.HOLD.is_set()


@pytest.mark.anyio
async def test_a_batch_queued_ahead_counts_against_max_queue_size_until_it_starts(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    async with started(tmp_path, "response_timeout: 0\nmax_queue_size: 2\n", executor) as (mv, mod):
        first = infer(mv, "hold", "a")
        await wait_until(lambda: mod.STARTED == [["hold", "a"]])
        ahead = infer(mv, "b", "c")
        await wait_until(lambda: busy(mv) == 2)  # queued at the worker: they still wait
        assert mv.scheduler.statistics()["queued"] == 2
        with pytest.raises(QueueFull):
            await mv.scheduler.infer("d", None)
        mod.HOLD.set()
        assert [await t for t in first] == ["hold", "a"]  # "b", "c" started: room again
        assert mv.scheduler.statistics()["queued"] == 0
        behind = infer(mv, "e", "f")
        assert [await t for t in ahead + behind] == ["b", "c", "e", "f"]
        assert mod.STARTED == [["hold", "a"], ["b", "c"], ["e", "f"]]


@pytest.mark.anyio
async def test_no_batch_ahead_with_a_queue_policy(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    # with max_queue_delay, a batch waits in the collector, where its requests' deadlines hold
    config = "response_timeout: 0\nmax_queue_delay: 10000\n"
    async with started(tmp_path, config, executor) as (mv, mod):
        assert mv.scheduler.statistics()["slots"] == 1
