"""Direct scheduling and the predict-slot gate: podium.runtime.direct, podium.runtime._scheduler.

Timing is checked by what happened (the events each model records, in order), never by how long
anything took.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_until
from starlette.requests import Request

from podium.config import ModelConfig
from podium.errors import InvalidInput, ModelError, QueueFull, Unavailable, http_status
from podium.model.native import NativeModel, inspect_class
from podium.runtime.direct import DirectScheduler


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(24, thread_name_prefix="test-model") as pool:
        yield pool


def direct(
    cls: type,
    executor: ThreadPoolExecutor,
    *,
    name: str = "m",
    concurrency: int = 1,
    max_queue_size: int = 100,
) -> DirectScheduler:
    instance = NativeModel(
        inspect_class(cls),
        ModelConfig(name=name),
        model_dir=Path("."),
        secrets={},
        executor=executor,
    )
    return DirectScheduler(
        instance, model=name, concurrency=concurrency, max_queue_size=max_queue_size
    )


def replay_concurrency(events: list[tuple[str, Any]], start: str, end: str) -> int:
    """The most ``start`` events not yet matched by an ``end``, replaying the log in order."""
    running = peak = 0
    for kind, _ in events:
        if kind == start:
            running += 1
            peak = max(peak, running)
        elif kind == end:
            running -= 1
    return peak


def check_predict_order(events: list[tuple[str, Any]], slots: int) -> None:
    kinds = [kind for kind, _ in events]
    assert replay_concurrency(events, "predict start", "predict end") == slots
    starts = [i for i, k in enumerate(kinds) if k == "predict start"]
    first_end = kinds.index("predict end")
    # the first `slots` predicts start before any ends; the next one only after one ended
    assert starts[slots - 1] < first_end < starts[slots]


# -- predict_concurrency -------------------------------------------------------------------------


@pytest.mark.anyio
async def test_preprocess_runs_outside_the_predict_bound(executor: ThreadPoolExecutor) -> None:
    events: list[tuple[str, Any]] = []
    all_in = asyncio.Event()

    class Model:
        async def preprocess(self, inputs):
            events.append(("pre start", inputs))
            if sum(k == "pre start" for k, _ in events) == 10:
                all_in.set()
            # every preprocess waits for all ten to be inside: they overlap, or this times out
            await asyncio.wait_for(all_in.wait(), 2)
            events.append(("pre end", inputs))
            return inputs + 100

        async def predict(self, inputs):
            events.append(("predict start", inputs))
            await asyncio.sleep(0.01)
            events.append(("predict end", inputs))
            return inputs * 2

        async def postprocess(self, outputs):
            return outputs + 1

    scheduler = direct(Model, executor, concurrency=5)
    results = await asyncio.gather(*(scheduler.infer(i, None) for i in range(10)))
    assert results == [(i + 100) * 2 + 1 for i in range(10)]
    assert replay_concurrency(events, "pre start", "pre end") == 10
    check_predict_order(events, slots=5)
    assert scheduler.statistics() == {"slots": 5, "busy": 0, "waiting": 0}


@pytest.mark.anyio
async def test_sync_preprocess_in_the_pool_behaves_the_same(
    executor: ThreadPoolExecutor,
) -> None:
    events: list[tuple[str, Any]] = []
    lock = threading.Lock()
    barrier = threading.Barrier(10, timeout=2)
    loop_thread = threading.get_ident()
    five_in = threading.Event()

    def record(kind: str, value: Any) -> None:
        assert threading.get_ident() != loop_thread
        with lock:
            events.append((kind, value))
            if sum(k == "predict start" for k, _ in events) == 5:
                five_in.set()

    class Model:
        def preprocess(self, inputs):
            record("pre start", inputs)
            barrier.wait()  # all ten at once in the pool, or BrokenBarrierError
            record("pre end", inputs)
            return inputs

        def predict(self, inputs):
            record("predict start", inputs)
            # The first five hold their slots until all five are in (the pool's threads finish
            # the preprocesses in any order, so a bare sleep could end one before the fifth starts).
            five_in.wait(2)
            time.sleep(0.01)
            record("predict end", inputs)
            return -inputs

    scheduler = direct(Model, executor, concurrency=5)
    results = await asyncio.gather(*(scheduler.infer(i, None) for i in range(10)))
    assert results == [-i for i in range(10)]
    assert replay_concurrency(events, "pre start", "pre end") == 10
    check_predict_order(events, slots=5)


@pytest.mark.anyio
async def test_same_request_object_through_the_scheduler(executor: ThreadPoolExecutor) -> None:
    seen: list[Any] = []

    class Model:
        async def preprocess(self, inputs, request: Request):
            seen.append(request)
            return inputs

        def predict(self, inputs, request: Request):
            seen.append(request)
            return inputs

        async def postprocess(self, outputs, request: Request):
            seen.append(request)
            return outputs

    request = object()
    assert await direct(Model, executor).infer("x", request) == "x"
    assert len(seen) == 3 and all(r is request for r in seen)


@pytest.mark.anyio
async def test_errors_release_the_slot(executor: ThreadPoolExecutor) -> None:
    calls: list[str] = []

    class Model:
        def preprocess(self, inputs):
            calls.append("pre")
            if inputs == "bad input":
                raise InvalidInput("'x' is required")
            return inputs

        async def predict(self, inputs):
            calls.append("predict")
            if inputs == "crash":
                raise RuntimeError("CUDA out of memory")
            return inputs

    scheduler = direct(Model, executor, name="gpu", concurrency=1)
    with pytest.raises(InvalidInput):
        await scheduler.infer("bad input", None)
    assert calls == ["pre"]  # predict never ran
    with pytest.raises(ModelError) as info:
        await scheduler.infer("crash", None)
    assert info.value.message == (  # a device's out of memory: 507 (docs/devices.md)
        "model 'gpu' predict ran out of memory on cpu (RuntimeError: CUDA out of memory); "
        "a smaller request may fit"
    )
    assert scheduler.statistics()["busy"] == 0
    assert await scheduler.infer("ok", None) == "ok"


# -- the waiting line: max_queue_size ------------------------------------------------------------


class Blocking:
    """A model whose predict waits until the test releases it; it records what started."""

    def __init__(self) -> None:
        self.started: list[Any] = []
        self.finished: list[Any] = []
        self.release = asyncio.Event()

    def model(self) -> type:
        outer = self

        class Model:
            async def predict(self, inputs):
                outer.started.append(inputs)
                await outer.release.wait()
                outer.finished.append(inputs)
                return inputs

        return Model


@pytest.mark.anyio
async def test_full_queue_refuses_at_once(executor: ThreadPoolExecutor) -> None:
    blocking = Blocking()
    scheduler = direct(blocking.model(), executor, name="busy", concurrency=2, max_queue_size=3)
    running = [asyncio.create_task(scheduler.infer(i, None)) for i in range(5)]
    await wait_until(lambda: scheduler.statistics()["waiting"] == 3)
    assert sorted(blocking.started) == [0, 1]
    async with asyncio.timeout(1):  # at once: it does not wait for a slot
        with pytest.raises(QueueFull) as info:
            await scheduler.infer("one too many", None)
    exc = info.value
    assert isinstance(exc, Unavailable) and http_status(exc) == 503
    assert "model 'busy'" in exc.message
    assert "max_queue_size 3" in exc.message
    assert "3 requests waiting" in exc.message
    blocking.release.set()
    assert await asyncio.gather(*running) == [0, 1, 2, 3, 4]
    assert "one too many" not in blocking.started
    assert scheduler.statistics() == {"slots": 2, "busy": 0, "waiting": 0}


@pytest.mark.anyio
async def test_cancelled_waiter_never_runs_predict(executor: ThreadPoolExecutor) -> None:
    blocking = Blocking()
    scheduler = direct(blocking.model(), executor, concurrency=2, max_queue_size=1)
    holders = [asyncio.create_task(scheduler.infer(name, None)) for name in ("a", "b")]
    await wait_until(lambda: len(blocking.started) == 2)
    waiter = asyncio.create_task(scheduler.infer("cancelled", None))
    await wait_until(lambda: scheduler.statistics()["waiting"] == 1)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert scheduler.statistics() == {"slots": 2, "busy": 2, "waiting": 0}
    # its place in line is free again: max_queue_size 1 lets the next one wait
    late = asyncio.create_task(scheduler.infer("late", None))
    await wait_until(lambda: scheduler.statistics()["waiting"] == 1)
    blocking.release.set()
    assert await asyncio.gather(*holders, late) == ["a", "b", "late"]
    assert "cancelled" not in blocking.started
    assert scheduler.statistics() == {"slots": 2, "busy": 0, "waiting": 0}
    # both slots are still there: two predicts can run at once
    blocking.release.clear()
    again = [asyncio.create_task(scheduler.infer(name, None)) for name in ("c", "d")]
    await wait_until(lambda: {"c", "d"} <= set(blocking.started))
    blocking.release.set()
    assert await asyncio.gather(*again) == ["c", "d"]


@pytest.mark.anyio
async def test_cancelled_predict_frees_its_slot(executor: ThreadPoolExecutor) -> None:
    blocking = Blocking()
    scheduler = direct(blocking.model(), executor, concurrency=1, max_queue_size=5)
    first = asyncio.create_task(scheduler.infer("first", None))
    await wait_until(lambda: blocking.started == ["first"])
    second = asyncio.create_task(scheduler.infer("second", None))
    await wait_until(lambda: scheduler.statistics()["waiting"] == 1)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    await wait_until(lambda: blocking.started == ["first", "second"])
    blocking.release.set()
    assert await second == "second"
    assert blocking.finished == ["second"]
    assert scheduler.statistics() == {"slots": 1, "busy": 0, "waiting": 0}


@pytest.mark.anyio
async def test_cancelled_sync_predict_holds_its_slot_until_it_returns(
    executor: ThreadPoolExecutor,
) -> None:
    # A thread cannot be stopped: when the caller of a sync predict is cancelled, the predict runs
    # on, and predict_concurrency must still count it, or cancelled requests would let any number
    # of predicts run at once.
    events: list[tuple[str, Any]] = []
    gates = {"a": threading.Event(), "b": threading.Event()}

    class Model:
        def predict(self, inputs):
            events.append(("predict start", inputs))
            assert gates[inputs].wait(2)
            events.append(("predict end", inputs))
            return inputs

    scheduler = direct(Model, executor, concurrency=1)
    a = asyncio.create_task(scheduler.infer("a", None))
    await wait_until(lambda: ("predict start", "a") in events)
    a.cancel()
    b = asyncio.create_task(scheduler.infer("b", None))
    await asyncio.sleep(0.05)  # room for a wrong start of b's predict
    gates["a"].set()
    gates["b"].set()
    assert await b == "b"
    with pytest.raises(asyncio.CancelledError):
        await a
    assert events == [
        ("predict start", "a"),
        ("predict end", "a"),
        ("predict start", "b"),
        ("predict end", "b"),
    ]
    assert scheduler.statistics()["busy"] == 0


@pytest.mark.anyio
async def test_a_cancelled_sync_predict_that_raises_logs_no_stray_error(
    executor: ThreadPoolExecutor, caplog: pytest.LogCaptureFixture
) -> None:
    started = threading.Event()
    release = threading.Event()

    class Model:
        def predict(self, inputs):
            started.set()
            assert release.wait(2)
            raise RuntimeError("after the client left")

    scheduler = direct(Model, executor)
    task = asyncio.create_task(scheduler.infer(None, None))
    assert await asyncio.to_thread(started.wait, 2)
    task.cancel()
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    del task
    gc.collect()
    await asyncio.sleep(0)
    assert not [r for r in caplog.records if r.name == "asyncio"]
