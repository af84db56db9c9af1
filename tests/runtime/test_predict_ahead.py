"""A thread worker of a plain sync predict takes requests queued ahead of its predict threads
(runtime/_thread_worker.py, queue_ahead): predict_concurrency stays the bound of predicts at once,
on the same threads, and a request whose client left before its predict started never runs."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
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
LOCK = threading.Lock()
RAN = []
THREADS = set()
RUNNING = [0, 0]


class Model:
    def predict(self, inputs):
        with LOCK:
            RUNNING[0] += 1
            RUNNING[1] = max(RUNNING)
            RAN.append(inputs)
            THREADS.add(threading.get_ident())
        if inputs == "hold":
            assert HOLD.wait(5)
        if isinstance(inputs, str) and inputs.startswith("x"):  # SLOW: 1 µs per character
            threading.Event().wait(len(inputs) / 1e6)
        threading.Event().wait(0.0002)  # a real wait: another thread could come in
        with LOCK:
            RUNNING[0] -= 1
        return inputs
"""


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
async def test_response_timeout_counts_from_the_predicts_start_not_the_wait_ahead(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    # two predicts of 0.6 s one after the other, at response_timeout 1: the second waits 0.6 s
    # queued ahead, then runs 0.6 s; timed from its arrival it would fail
    async with started(tmp_path, "response_timeout: 1\n", executor) as (mv, mod):
        mod.HOLD.set()  # "hold" does not wait for the test
        assert mv.scheduler.statistics()["slots"] == 1 + QUEUE_AHEAD  # taken ahead, timed
        slow = "x" * 600_000  # see SLOW: 0.6 s
        first = asyncio.create_task(mv.scheduler.infer(slow, None))
        await wait_until(lambda: len(mod.RAN) == 1)
        second = asyncio.create_task(mv.scheduler.infer(slow, None))
        await wait_until(lambda: mv.scheduler.statistics()["busy"] == 2)  # queued ahead
        assert (await first, await second) == (slow, slow)
        assert mod.RUNNING[1] == 1


@pytest.mark.anyio
async def test_requests_ahead_of_a_stuck_predict_go_to_the_replacement_worker(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    async with started(tmp_path, "response_timeout: 0.3\n", executor) as (mv, mod):
        held = asyncio.create_task(mv.scheduler.infer("hold", None))
        await wait_until(lambda: mod.RAN == ["hold"])
        after = asyncio.create_task(mv.scheduler.infer("after", None))
        await wait_until(lambda: mv.scheduler.statistics()["busy"] == 2)  # queued ahead
        with pytest.raises(ResponseTimeout):
            await held  # its thread runs on, past the timeout
        # "after" never ran behind it: it was taken back and ran on the worker that replaced
        # the stuck one (on another thread), while "hold" still runs
        assert await after == "after"
        assert mod.RAN == ["hold", "after"]
        assert len(mod.THREADS) == 2
        assert not mod.HOLD.is_set()


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
