"""Continuous batching: podium.runtime.continuous (ContinuousScheduler) over thread workers
and worker processes (``workers: process``: the lane steps the model across the process
boundary, runtime/process/_steps.py).

Joining and leaving between steps, the batch bound, each request's own items, cancellation,
a failing step or preprocess, per-request back-pressure, sync and async step, what only worker
processes have (a worker dying mid-step, arrays crossing, the tokenizer), and the load-time
rules; judged by what each step held (the model writes each step's requests to a file beside it,
which both kinds of worker can), never by timing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import threading
from collections.abc import AsyncGenerator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import wait_until

from podium.errors import (
    DefinitionError,
    ModelError,
    QueueFull,
    QueueTimeout,
    Unavailable,
    WorkerDied,
)
from podium.model.discovery import discover_all
from podium.runtime.continuous import ContinuousScheduler
from podium.runtime.loading import build_version, check_paths
from podium.runtime.registry import ModelVersion
from podium.runtime.workers import WorkerState

# Each request asks for ``n`` items, one per step; ``hold`` makes its first step wait while the
# test sends requests (Probe.hold / release). Each step appends its requests' ids to steps.jsonl beside the model; while the file ``hold``
# exists there, a step with a ``hold`` request on its first step waits (a gate that works
# across the process boundary too).
GEN = """
import asyncio, json, pathlib
HERE = pathlib.Path(__file__).parent
class Model:
    async def step(self, batch):
        with open(HERE / "steps.jsonl", "a") as f:
            f.write(json.dumps([g.inputs["id"] for g in batch]) + "\\n")
        if any(g.inputs.get("hold") and g.first for g in batch):
            while (HERE / "hold").exists():
                await asyncio.sleep(0.005)
        for g in batch:
            if g.first:
                g.state["i"] = 0
            g.state["i"] += 1
            g.emit(f"{g.inputs['id']}:{g.state['i']}")
            if g.state["i"] >= g.inputs["n"]:
                g.finish()
"""

SYNC_GEN = """
import threading
STEPS = []
THREADS = []
class Model:
    def step(self, batch):
        STEPS.append([g.inputs["id"] for g in batch])
        THREADS.append(threading.current_thread().name)
        for g in batch:
            g.state["i"] = g.state.get("i", 0) + 1
            g.emit(g.state["i"])
            if g.state["i"] >= g.inputs["n"]:
                g.finish()
"""

FAILING = """
import json, pathlib
HERE = pathlib.Path(__file__).parent
class Model:
    def preprocess(self, inputs):
        if inputs.get("bad_input"):
            raise ValueError("not this one")
        return {**inputs, "pre": True}
    async def step(self, batch):
        with open(HERE / "steps.jsonl", "a") as f:
            f.write(json.dumps([g.inputs["id"] for g in batch]) + "\\n")
        assert all(g.inputs["pre"] for g in batch)
        if any(g.inputs.get("boom") for g in batch):
            raise ValueError("boom")
        for g in batch:
            g.emit(g.inputs["id"])
            g.finish()
"""

CONT = "continuous_batching: true\n"


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(8, thread_name_prefix="test-cont") as pool:
        yield pool


@pytest.fixture(params=["thread", "process"])
def kind(request: pytest.FixtureRequest) -> str:
    """The kind of worker the lanes step: in the server's process, or a worker process."""
    return str(request.param)


def write_model(tmp_path: Path, code: str, config: str, name: str = "m") -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "model.py").write_text(code)
    (folder / "config.yaml").write_text(config)
    return folder


def version_from(
    tmp_path: Path, code: str, config: str, executor: ThreadPoolExecutor
) -> ModelVersion:
    found, problems = discover_all(write_model(tmp_path, code, config))
    assert not problems
    return build_version(found[0], secrets={}, executor=executor)


class Probe:
    """What the model's steps held (its steps.jsonl) and the gate its ``hold`` steps wait at."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    @property
    def steps(self) -> list[list[str]]:
        log = self.folder / "steps.jsonl"
        if not log.exists():
            return []
        return [json.loads(line) for line in log.read_text().splitlines()]

    def hold(self) -> None:
        (self.folder / "hold").touch()

    def release(self) -> None:
        (self.folder / "hold").unlink(missing_ok=True)

    async def entered(self, n: int = 1) -> None:
        """Until ``n`` steps have begun (the order of events, not their speed)."""
        await wait_until(lambda: len(self.steps) >= n, what=f"{n} steps begun")


def model_of(
    tmp_path: Path, code: str, config: str, executor: ThreadPoolExecutor, kind: str
) -> tuple[ModelVersion, Probe]:
    mv = version_from(tmp_path, code, config + f"workers: {kind}\n", executor)
    return mv, Probe(tmp_path / "m")


def model_module(mv: ModelVersion) -> Any:
    obj = mv.instance.obj  # type: ignore[attr-defined]
    return sys.modules[type(obj).__module__]


def sched(mv: ModelVersion) -> ContinuousScheduler:
    assert isinstance(mv.scheduler, ContinuousScheduler)
    return mv.scheduler


@contextlib.asynccontextmanager
async def loaded(mv: ModelVersion) -> AsyncGenerator[ContinuousScheduler, None]:
    await mv.pool.start()  # type: ignore[union-attr]
    try:
        yield sched(mv)
    finally:
        await sched(mv).close()


async def collect(s: ContinuousScheduler, inputs: Any) -> list[Any]:
    return [item async for item in s.stream(inputs, None)]


@pytest.mark.anyio
async def test_a_request_joins_between_steps(
    tmp_path: Path, executor: ThreadPoolExecutor, kind: str
) -> None:
    mv, probe = model_of(tmp_path, GEN, CONT + "batch_size: 4\n", executor, kind)
    async with loaded(mv) as s:  # (a worker process describes the model once it started)
        caps = mv.instance.capabilities
        assert caps.streaming and caps.continuous
        probe.hold()
        a = asyncio.ensure_future(collect(s, {"id": "a", "n": 3, "hold": True}))
        await probe.entered()  # step 1 runs (held) with a alone
        b = asyncio.ensure_future(collect(s, {"id": "b", "n": 2}))
        await asyncio.sleep(0)  # b arrives while step 1 runs
        for _ in range(5):
            await asyncio.sleep(0)
        assert probe.steps == [["a"]]
        probe.release()
        assert await a == ["a:1", "a:2", "a:3"]
        assert await b == ["b:1", "b:2"]
    assert probe.steps == [["a"], ["a", "b"], ["a", "b"]]


@pytest.mark.anyio
async def test_batch_size_bounds_the_batch_and_waiting_ones_join(
    tmp_path: Path, executor: ThreadPoolExecutor, kind: str
) -> None:
    mv, probe = model_of(tmp_path, GEN, CONT + "batch_size: 2\n", executor, kind)
    async with loaded(mv) as s:
        lengths = {"a": 1, "b": 3, "c": 2, "d": 1}
        runs = [asyncio.ensure_future(collect(s, {"id": k, "n": n})) for k, n in lengths.items()]
        results = await asyncio.gather(*runs)
        assert s.statistics()["steps"] == len(probe.steps)
    for (k, n), items in zip(lengths.items(), results, strict=True):
        assert items == [f"{k}:{i}" for i in range(1, n + 1)]  # its own items, in order
    assert all(len(batch) <= 2 for batch in probe.steps)
    # a finishes after step 1: c joins at step 2; c and b finish at step 3: d joins at step 4
    assert probe.steps == [["a", "b"], ["b", "c"], ["b", "c"], ["d"]]


@pytest.mark.anyio
async def test_a_cancelled_consumer_leaves_at_the_next_step(
    tmp_path: Path, executor: ThreadPoolExecutor, kind: str
) -> None:
    mv, probe = model_of(tmp_path, GEN, CONT + "batch_size: 4\n", executor, kind)
    async with loaded(mv) as s:
        probe.hold()
        leaver = s.stream({"id": "x", "n": 100}, None)
        reading = asyncio.ensure_future(anext(leaver))
        stayer = asyncio.ensure_future(collect(s, {"id": "y", "n": 4, "hold": True}))
        await probe.entered()  # step 1 holds x and y
        reading.cancel()  # the client of x leaves while step 1 runs
        with pytest.raises(asyncio.CancelledError):
            await reading
        await leaver.aclose()
        probe.release()
        assert await stayer == ["y:1", "y:2", "y:3", "y:4"]
        assert s.statistics()["active"] == 0
    assert probe.steps == [["x", "y"], ["y"], ["y"], ["y"]]


@pytest.mark.anyio
async def test_a_failing_step_fails_its_requests_and_the_next_succeeds(
    tmp_path: Path, executor: ThreadPoolExecutor, kind: str
) -> None:
    mv, probe = model_of(tmp_path, FAILING, CONT + "batch_size: 4\n", executor, kind)
    async with loaded(mv) as s:
        with pytest.raises(ModelError, match=r"model 'm' step raised ValueError: boom"):
            await collect(s, {"id": "bad", "boom": True})
        assert await collect(s, {"id": "ok"}) == ["ok"]
        assert await s.infer({"id": "again"}, None) == ["again"]
    assert probe.steps == [["bad"], ["ok"], ["again"]]


@pytest.mark.anyio
async def test_a_failing_preprocess_fails_its_request_alone(
    tmp_path: Path, executor: ThreadPoolExecutor, kind: str
) -> None:
    mv, probe = model_of(tmp_path, FAILING, CONT + "batch_size: 4\n", executor, kind)
    async with loaded(mv) as s:
        bad, ok = await asyncio.gather(
            collect(s, {"id": "bad", "bad_input": True}),
            collect(s, {"id": "ok"}),
            return_exceptions=True,
        )
        assert ok == ["ok"]
        assert isinstance(bad, ModelError)
        assert "model 'm' preprocess raised ValueError: not this one" in str(bad)
        assert await collect(s, {"id": "next"}) == ["next"]
    assert probe.steps == [["ok"], ["next"]]


@pytest.mark.anyio
async def test_a_slow_reader_sits_out_while_another_advances(
    tmp_path: Path, executor: ThreadPoolExecutor, kind: str
) -> None:
    config = CONT + "batch_size: 4\nstream_buffer: 2\n"
    mv, probe = model_of(tmp_path, GEN, config, executor, kind)
    async with loaded(mv) as s:
        slow = s.stream({"id": "slow", "n": 10}, None)
        assert await anext(slow) == "slow:1"  # then it stops reading
        fast = await collect(s, {"id": "fast", "n": 6})
        assert fast == [f"fast:{i}" for i in range(1, 7)]
        # slow's buffer holds 2 items: it ran 3 steps (1 read + 2 buffered), then sat out
        assert sum("slow" in b for b in probe.steps) == 3
        assert sum("fast" in b for b in probe.steps) == 6
        rest = [item async for item in slow]
        assert rest == [f"slow:{i}" for i in range(2, 11)]
        assert s.statistics()["active"] == 0


@pytest.mark.anyio
async def test_sync_step_runs_in_the_executor(tmp_path: Path, executor: ThreadPoolExecutor) -> None:
    mv = version_from(tmp_path, SYNC_GEN, CONT + "batch_size: 2\n", executor)
    mod = model_module(mv)
    async with loaded(mv) as s:
        a, b = await asyncio.gather(
            s.infer({"id": "a", "n": 2}, None), s.infer({"id": "b", "n": 3}, None)
        )
    assert (a, b) == ([1, 2], [1, 2, 3])
    assert mod.STEPS == [["a", "b"], ["a", "b"], ["b"]]
    # in the model's own thread (one: one batch at a time), never on the loop
    assert len(set(mod.THREADS)) == 1
    assert threading.current_thread().name not in mod.THREADS


@pytest.mark.anyio
async def test_a_full_line_is_refused_at_once(
    tmp_path: Path, executor: ThreadPoolExecutor, kind: str
) -> None:
    config = CONT + "batch_size: 1\nmax_queue_size: 1\n"
    mv, probe = model_of(tmp_path, GEN, config, executor, kind)
    async with loaded(mv) as s:
        probe.hold()
        running = asyncio.ensure_future(collect(s, {"id": "a", "n": 1, "hold": True}))
        await probe.entered()
        queued = asyncio.ensure_future(collect(s, {"id": "b", "n": 1}))
        await asyncio.sleep(0)
        assert s.statistics()["queued"] == 1
        with pytest.raises(QueueFull, match="max_queue_size 1") as full:
            await collect(s, {"id": "c", "n": 1})
        # in the words (and with the Retry-After) of every scheduler's full queue
        assert full.value.message == QueueFull.of(mv.name, 1, 1).message
        assert full.value.retry_after == 1.0
        probe.release()
        assert await running == ["a:1"]
        assert await queued == ["b:1"]


@pytest.mark.anyio
async def test_a_request_past_max_queue_delay_is_refused_and_never_stepped(
    tmp_path: Path, executor: ThreadPoolExecutor, kind: str
) -> None:
    config = CONT + "batch_size: 1\nmax_queue_delay: 50\n"
    mv, probe = model_of(tmp_path, GEN, config, executor, kind)
    async with loaded(mv) as s:
        probe.hold()
        running = asyncio.ensure_future(collect(s, {"id": "a", "n": 1, "hold": True}))
        await probe.entered()
        with pytest.raises(QueueTimeout) as info:  # no room for 50 ms: refused, unrun
            await collect(s, {"id": "b", "n": 1})
        assert info.value.retry_after == 1.0
        probe.release()
        assert await running == ["a:1"]
        assert await collect(s, {"id": "c", "n": 1}) == ["c:1"]
    assert probe.steps == [["a"], ["c"]]


@pytest.mark.anyio
async def test_close_fails_active_requests(
    tmp_path: Path, executor: ThreadPoolExecutor, kind: str
) -> None:
    mv, probe = model_of(tmp_path, GEN, CONT + "batch_size: 1\n", executor, kind)
    await mv.pool.start()  # type: ignore[union-attr]
    s = sched(mv)
    probe.hold()
    running = asyncio.ensure_future(collect(s, {"id": "a", "n": 1, "hold": True}))
    await probe.entered()
    waiting = asyncio.ensure_future(collect(s, {"id": "b", "n": 1}))
    await asyncio.sleep(0)
    await s.close()
    for task in (running, waiting):
        with pytest.raises(Unavailable):
            await task


# -- what only worker processes have -----------------------------------------------------------
# A worker process that dies mid-step fails every request of its lane with ``WorkerDied`` and is
# replaced; arrays cross both ways while each request's ``state`` stays in the worker process; a
# generating model whose tokenizer cannot reach the server does not start, saying why.

PROCESS = "continuous_batching: true\nworkers: process\nbatch_size: 4\n"

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
            if g.inputs.get("lock"):
                g.emit(threading.Lock())  # cannot cross back
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


@pytest.mark.anyio
async def test_arrays_cross_and_the_state_stays_in_the_worker(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    mv = version_from(tmp_path, MODEL, PROCESS, executor)
    async with loaded(mv) as s:
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        a, b = await asyncio.gather(collect(s, {"x": x, "n": 3}), collect(s, {"x": -x, "n": 2}))
        assert [item["i"] for item in a] == [1, 2, 3] and [item["i"] for item in b] == [1, 2]
        for i, item in enumerate(a, 1):
            assert item["y"].dtype == np.float32 and np.array_equal(item["y"], x * i)
        assert np.array_equal(b[1]["y"], -x * 2)
        assert s.statistics()["steps"] == 3


@pytest.mark.anyio
async def test_a_worker_that_dies_mid_step_fails_its_lane_and_is_replaced(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    mv = version_from(tmp_path, MODEL, PROCESS + "stream_buffer: 1\n", executor)
    pool = mv.pool
    assert pool is not None
    x = np.ones(2)
    async with loaded(mv) as s:
        sitting = s.stream({"x": x, "n": 100}, None)
        assert (await anext(sitting))["i"] == 1  # then it stops reading: it sits out
        with pytest.raises(WorkerDied, match=r"died: it exited with code 3"):
            await collect(s, {"die": True})
        with pytest.raises(WorkerDied):  # in the same lane: its state died with the process
            async for _ in sitting:
                pass
        await wait_until(
            lambda: any(w.state is WorkerState.READY for w in pool.gate.workers),
            within=60,
            what="a replacement worker process ready",
        )
        again = await collect(s, {"x": x, "n": 2})  # a new process, a new lane
        assert [item["i"] for item in again] == [1, 2]
        assert s.statistics()["active"] == 0


@pytest.mark.anyio
async def test_an_item_that_cannot_cross_back_fails_its_step_and_the_next_runs(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    mv = version_from(tmp_path, MODEL, PROCESS, executor)
    async with loaded(mv) as s:
        with pytest.raises(ModelError, match="emitted an item that cannot be sent back"):
            await collect(s, {"x": np.ones(1), "n": 2, "lock": True})
        assert [item["i"] for item in await collect(s, {"x": np.ones(1), "n": 2})] == [1, 2]


@pytest.mark.anyio
async def test_a_tokenizer_that_cannot_reach_the_server_fails_the_start(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    mv = version_from(tmp_path, UNPICKLABLE_TOKENIZER, PROCESS, executor)
    with pytest.raises(WorkerDied, match="tokenizer cannot be sent to the server"):
        await mv.pool.start()  # type: ignore[union-attr]
    await mv.scheduler.close()


# -- load-time rules ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "config", "expected"),
    [
        (
            "class Model:\n    def predict(self, x):\n        return x\n",
            CONT,
            "has no step method",
        ),
        (
            "class Model:\n    def step(self, batch):\n        yield 1\n",
            CONT,
            "step is a generator",
        ),
        (
            "class Model:\n    async def step(self, batch):\n        yield 1\n",
            CONT,
            "step is a async generator",
        ),
        (
            "class Model:\n    def step(self, batch):\n        pass\n"
            "    def postprocess(self, x):\n        return x\n",
            CONT,
            "postprocess cannot be combined with continuous_batching",
        ),
        (
            "class Model:\n    def step(self, batch, other):\n        pass\n",
            CONT,
            "step must take exactly one parameter",
        ),
        (
            "class Model:\n    def step(self, batch):\n        pass\n",
            "",
            "step method serves only with continuous_batching",
        ),
        (
            "class Model:\n    def step(self, batch):\n        pass\n",
            CONT + "sequence_batching: true\n",
            # with sequences, continuous batching overlaps a sequence's requests: a stream
            "predict must be a generator",
        ),
    ],
)
def test_load_time_rules(
    tmp_path: Path, executor: ThreadPoolExecutor, code: str, config: str, expected: str
) -> None:
    folder = write_model(tmp_path, code, config)
    problems = check_paths([folder])  # what `podium check` reports
    assert any(expected in p and "'m'" in p for p in problems), problems
    found, _ = discover_all(folder)
    with pytest.raises(DefinitionError, match=expected):
        build_version(found[0], secrets={}, executor=executor)


def test_predict_may_stay_and_preprocess_is_allowed(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    folder = write_model(tmp_path, FAILING, CONT + "batch_size: 3\n")
    assert check_paths([folder]) == []
