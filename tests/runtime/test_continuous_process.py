"""Continuous batching in worker processes: what only the process boundary has
(runtime/process/_steps.py). The behaviours both kinds of worker share are in test_continuous.py,
parametrized over them.

A worker process that dies mid-step fails every request of its lane with ``WorkerDied`` and is
replaced; arrays cross both ways while each request's ``state`` stays in the worker process; a
generating model whose tokenizer cannot reach the server does not start, saying why.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from podium.errors import WorkerDied
from podium.model.discovery import discover_all
from podium.runtime.continuous import ContinuousScheduler
from podium.runtime.loading import build_version
from podium.runtime.registry import ModelVersion
from podium.runtime.workers import WorkerState

CONFIG = "continuous_batching: true\nworkers: process\nbatch_size: 4\n"

# ``die`` ends the worker process in the middle of a step; each step emits the request's step
# count times its array ``x`` and keeps a lock in its state (it could not be pickled: the state
# never crosses).
MODEL = """
import os, threading
class Model:
    async def step(self, batch):
        for g in batch:
            if g.inputs.get("die"):
                os._exit(3)
        for g in batch:
            if g.first:
                g.state["lock"] = threading.Lock()
                g.state["i"] = 0
            g.state["i"] += 1
            g.emit({"i": g.state["i"], "y": g.inputs["x"] * g.state["i"]})
            if g.state["i"] >= g.inputs["n"]:
                g.finish()
"""

UNPICKLABLE_TOKENIZER = """
import threading
class Model:
    def load(self):
        self.tokenizer = threading.Lock()
        self.context_length = 16
    def step(self, batch):
        pass
"""


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(4, thread_name_prefix="test-cont-proc") as pool:
        yield pool


def version_of(
    tmp_path: Path, code: str, config: str, executor: ThreadPoolExecutor
) -> ModelVersion:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.py").write_text(code)
    (folder / "config.yaml").write_text(config)
    found, problems = discover_all(folder)
    assert not problems
    return build_version(found[0], secrets={}, executor=executor)


async def collect(s: ContinuousScheduler, inputs: Any) -> list[Any]:
    return [item async for item in s.stream(inputs, None)]


async def ready_worker(mv: ModelVersion) -> None:
    """Until the pool has a ready worker again (its replacement started)."""
    pool = mv.pool
    assert pool is not None
    while not any(w.state is WorkerState.READY for w in pool.gate.workers):  # noqa: ASYNC110 (no event for it)
        await asyncio.sleep(0.01)


@pytest.mark.anyio
async def test_arrays_cross_and_the_state_stays_in_the_worker(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    mv = version_of(tmp_path, MODEL, CONFIG, executor)
    await mv.pool.start()  # type: ignore[union-attr]
    s = mv.scheduler
    assert isinstance(s, ContinuousScheduler)
    try:
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        a, b = await asyncio.gather(collect(s, {"x": x, "n": 3}), collect(s, {"x": -x, "n": 2}))
        assert [item["i"] for item in a] == [1, 2, 3] and [item["i"] for item in b] == [1, 2]
        for i, item in enumerate(a, 1):
            assert item["y"].dtype == np.float32 and np.array_equal(item["y"], x * i)
        assert np.array_equal(b[1]["y"], -x * 2)
        assert s.statistics()["steps"] == 3
    finally:
        await s.close()


@pytest.mark.anyio
async def test_a_worker_that_dies_mid_step_fails_its_lane_and_is_replaced(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    mv = version_of(tmp_path, MODEL, CONFIG + "stream_buffer: 1\n", executor)
    await mv.pool.start()  # type: ignore[union-attr]
    s = mv.scheduler
    assert isinstance(s, ContinuousScheduler)
    x = np.ones(2)
    try:
        sitting = s.stream({"x": x, "n": 100}, None)
        assert (await anext(sitting))["i"] == 1  # then it stops reading: it sits out
        with pytest.raises(WorkerDied, match=r"died: it exited with code 3"):
            await collect(s, {"die": True})
        with pytest.raises(WorkerDied):  # in the same lane: its state died with the process
            async for _ in sitting:
                pass
        await ready_worker(mv)
        again = await collect(s, {"x": x, "n": 2})  # a new process, a new lane
        assert [item["i"] for item in again] == [1, 2]
        assert s.statistics()["active"] == 0
    finally:
        await s.close()


@pytest.mark.anyio
async def test_a_tokenizer_that_cannot_reach_the_server_fails_the_start(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    mv = version_of(tmp_path, UNPICKLABLE_TOKENIZER, CONFIG, executor)
    with pytest.raises(WorkerDied, match="tokenizer cannot be sent to the server"):
        await mv.pool.start()  # type: ignore[union-attr]
    await mv.scheduler.close()
