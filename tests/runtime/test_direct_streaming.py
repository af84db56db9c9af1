"""Streaming through the direct scheduler: order, cancellation, back-pressure, slot release.

Every test runs with an async generator and with a sync generator ``predict``. Order of events is
what the models record; nothing asserts how long anything took.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_until
from starlette.requests import Request

from podium.config import ModelConfig
from podium.errors import ModelError, QueueFull
from podium.model.native import NativeModel, inspect_class
from podium.runtime.direct import DirectScheduler

FLAVORS = ["async", "sync"]


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(16, thread_name_prefix="test-model") as pool:
        yield pool


def direct(
    cls: type,
    executor: ThreadPoolExecutor,
    *,
    concurrency: int = 1,
    stream_buffer: int = 16,
    max_queue_size: int = 100,
    name: str = "m",
) -> DirectScheduler:
    instance = NativeModel(
        inspect_class(cls),
        ModelConfig(name=name),
        model_dir=Path("."),
        secrets={},
        executor=executor,
    )
    return DirectScheduler(
        instance,
        model=name,
        concurrency=concurrency,
        max_queue_size=max_queue_size,
        stream_buffer=stream_buffer,
    )


def streaming_model(flavor: str, body: Callable[[Any], Iterator[Any]]) -> type:
    """A model whose predict yields what ``body(inputs)`` yields, as an async or sync generator."""
    if flavor == "sync":

        def predict(self, inputs):
            yield from body(inputs)

    else:

        async def predict(self, inputs):  # type: ignore[misc]
            for item in body(inputs):
                yield item
                await asyncio.sleep(0)

    return type("Model", (), {"predict": predict})


async def collect(items: AsyncIterator[Any]) -> list[Any]:
    async with contextlib.aclosing(items) as stream:  # type: ignore[type-var]
        return [item async for item in stream]


# -- order ---------------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("flavor", FLAVORS)
async def test_items_come_in_order(executor: ThreadPoolExecutor, flavor: str) -> None:
    model = streaming_model(flavor, lambda n: iter(range(n)))
    scheduler = direct(model, executor, stream_buffer=3)
    assert await collect(scheduler.stream(50, None)) == list(range(50))
    assert await collect(scheduler.stream(0, None)) == []
    assert scheduler.statistics()["busy"] == 0


@pytest.mark.anyio
async def test_preprocess_feeds_the_generator_with_the_same_request(
    executor: ThreadPoolExecutor,
) -> None:
    seen: list[Any] = []

    class Model:
        def preprocess(self, inputs, request: Request):
            seen.append(request)
            return inputs.split()

        async def predict(self, words, request: Request):
            seen.append(request)
            for word in words:
                yield word.upper()

    request = object()
    items = await collect(direct(Model, executor).stream("a b c", request))
    assert items == ["A", "B", "C"]
    assert seen == [request, request] and seen[0] is request


@pytest.mark.anyio
async def test_a_non_streaming_model_yields_one_item(executor: ThreadPoolExecutor) -> None:
    class Model:
        def predict(self, inputs):
            return inputs * 2

        def postprocess(self, outputs):
            return {"out": outputs}

    assert await collect(direct(Model, executor).stream(4, None)) == [{"out": 8}]


# -- the consumer goes away ----------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("where", ["at yield", "inside an await"])
async def test_closing_the_consumer_closes_the_async_generator(
    executor: ThreadPoolExecutor, where: str
) -> None:
    seen: list[str] = []
    never = asyncio.Event()

    class Model:
        async def predict(self, inputs):
            try:
                if inputs == "second":
                    yield "second"
                    return
                yield 0
                if where == "inside an await":
                    await never.wait()
                i = 1
                while True:
                    yield i
                    i += 1
                    await asyncio.sleep(0)
            except BaseException as exc:
                seen.append(type(exc).__name__)
                raise
            finally:
                seen.append("finally")

    scheduler = direct(Model, executor, concurrency=1, stream_buffer=2)
    stream = scheduler.stream("first", None)
    assert await anext(stream) == 0
    await asyncio.sleep(0.01)  # let the producer run ahead into the buffer (or block on `never`)
    await stream.aclose()  # type: ignore[attr-defined]
    # closed before aclose() returned, and the slot is free at once
    assert seen in (["GeneratorExit", "finally"], ["CancelledError", "finally"])
    if where == "inside an await":
        assert seen[0] == "CancelledError"
    assert scheduler.statistics() == {"slots": 1, "busy": 0, "waiting": 0}
    second = scheduler.stream("second", None)
    async with asyncio.timeout(1):
        assert await anext(second) == "second"
    await second.aclose()  # type: ignore[attr-defined]


@pytest.mark.anyio
async def test_cancelling_the_consumer_task_closes_the_generator(
    executor: ThreadPoolExecutor,
) -> None:
    got: list[Any] = []
    closed = asyncio.Event()

    class Model:
        async def predict(self, inputs):
            try:
                for i in range(1000):
                    yield i
                    await asyncio.sleep(0)
            finally:
                closed.set()

    scheduler = direct(Model, executor, stream_buffer=2)

    async def consumer() -> None:
        async with contextlib.aclosing(scheduler.stream(None, None)) as items:  # type: ignore[type-var]
            async for item in items:
                got.append(item)
                await asyncio.sleep(10)  # a client that stopped reading

    task = asyncio.create_task(consumer())
    await wait_until(lambda: got == [0])
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert closed.is_set()
    assert scheduler.statistics()["busy"] == 0


@pytest.mark.anyio
async def test_closing_the_consumer_closes_the_sync_generator(
    executor: ThreadPoolExecutor,
) -> None:
    closed = threading.Event()
    seen: list[str] = []

    class Model:
        def predict(self, inputs):
            if inputs == "second":
                yield "second"
                return
            try:
                i = 0
                while True:
                    yield i
                    i += 1
            except GeneratorExit:
                seen.append("GeneratorExit")
                raise
            finally:
                closed.set()

    scheduler = direct(Model, executor, concurrency=1, stream_buffer=2)
    stream = scheduler.stream("first", None)
    assert await anext(stream) == 0
    assert await anext(stream) == 1
    await stream.aclose()  # type: ignore[attr-defined]
    # the slot is free at once; the generator is closed in the pool shortly after
    assert scheduler.statistics() == {"slots": 1, "busy": 0, "waiting": 0}
    second = scheduler.stream("second", None)
    async with asyncio.timeout(1):
        assert await anext(second) == "second"
    await second.aclose()  # type: ignore[attr-defined]
    assert await asyncio.to_thread(closed.wait, 2)
    assert seen == ["GeneratorExit"]


@pytest.mark.anyio
@pytest.mark.parametrize("flavor", FLAVORS)
async def test_consumer_cancelled_while_waiting_for_a_slot(
    executor: ThreadPoolExecutor, flavor: str
) -> None:
    started: list[Any] = []
    release = threading.Event()

    class Sync:
        def predict(self, inputs):
            started.append(inputs)
            if inputs == "holder":
                assert release.wait(2)
            yield inputs

    class Async:
        async def predict(self, inputs):
            started.append(inputs)
            if inputs == "holder":
                await wait_until(release.is_set)
            yield inputs

    model = Sync if flavor == "sync" else Async
    scheduler = direct(model, executor, concurrency=1, max_queue_size=1)
    holder = asyncio.create_task(collect(scheduler.stream("holder", None)))
    await wait_until(lambda: started == ["holder"])
    waiter = asyncio.create_task(collect(scheduler.stream("waiter", None)))
    await wait_until(lambda: scheduler.statistics()["waiting"] == 1)
    with pytest.raises(QueueFull):
        await collect(scheduler.stream("refused", None))
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    release.set()
    assert await holder == ["holder"]
    assert await collect(scheduler.stream("after", None)) == ["after"]
    assert started == ["holder", "after"]
    assert scheduler.statistics() == {"slots": 1, "busy": 0, "waiting": 0}


# -- a slow consumer -----------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("flavor", FLAVORS)
async def test_slot_is_released_when_the_generator_finishes(
    executor: ThreadPoolExecutor, flavor: str
) -> None:
    log: list[str] = []
    lock = threading.Lock()

    def record(event: str) -> None:
        with lock:
            log.append(event)

    def body(inputs: Any) -> Iterator[Any]:
        if inputs == "second":
            record("second predict started")
            yield "second"
            return
        for i in range(5):
            record(f"generated {i}")
            yield i
        record("generator finished")

    scheduler = direct(streaming_model(flavor, body), executor, concurrency=1, stream_buffer=2)
    items = scheduler.stream("first", None)
    second: asyncio.Task[list[Any]] | None = None
    for expected in range(5):
        assert await anext(items) == expected
        record(f"read {expected}")
        if expected == 2:
            # 3 read, 2 buffered: the generator can finish although 2 items are still unread
            await wait_until(lambda: "generator finished" in log)
            second = asyncio.create_task(collect(scheduler.stream("second", None)))
            await wait_until(lambda: "second predict started" in log)
    with pytest.raises(StopAsyncIteration):
        await anext(items)
    assert second is not None and await second == ["second"]
    position = log.index
    assert position("generator finished") < position("second predict started") < position("read 4")
    assert position("read 2") < position("generator finished") < position("read 3")
    assert scheduler.statistics()["busy"] == 0


@pytest.mark.anyio
@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("buffer", [1, 2, 4])
async def test_back_pressure(executor: ThreadPoolExecutor, flavor: str, buffer: int) -> None:
    counts = {"generated": 0, "read": 0}
    ahead: list[int] = []

    def body(inputs: Any) -> Iterator[Any]:
        for i in range(1000):
            counts["generated"] += 1
            ahead.append(counts["generated"] - counts["read"])
            yield i

    scheduler = direct(streaming_model(flavor, body), executor, stream_buffer=buffer)
    async with contextlib.aclosing(scheduler.stream(None, None)) as items:  # type: ignore[type-var]
        for expected in range(8):
            assert await anext(items) == expected
            counts["read"] += 1
            await asyncio.sleep(0.005)  # a slow reader: the generator runs as far ahead as it may
    # never more than the buffer plus the one item waiting to go in
    assert max(ahead) == buffer + 1
    assert counts["generated"] <= 8 + buffer + 1


# -- errors --------------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("flavor", FLAVORS)
async def test_an_exception_mid_stream(executor: ThreadPoolExecutor, flavor: str) -> None:
    def body(inputs: Any) -> Iterator[Any]:
        yield "a"
        yield "b"
        raise ValueError("tokenizer broke")

    scheduler = direct(streaming_model(flavor, body), executor, name="llm", stream_buffer=1)
    got: list[Any] = []
    with pytest.raises(ModelError) as info:
        async for item in scheduler.stream(None, None):
            got.append(item)
    assert got == ["a", "b"]
    assert info.value.message == "model 'llm' predict raised ValueError: tokenizer broke"
    assert scheduler.statistics()["busy"] == 0


@pytest.mark.anyio
@pytest.mark.parametrize("flavor", FLAVORS)
async def test_an_exception_before_the_first_item(
    executor: ThreadPoolExecutor, flavor: str
) -> None:
    def body(inputs: Any) -> Iterator[Any]:
        raise KeyError("prompt")
        yield  # pragma: no cover

    scheduler = direct(streaming_model(flavor, body), executor, name="llm")
    with pytest.raises(ModelError, match="model 'llm' predict raised KeyError"):
        await collect(scheduler.stream(None, None))
    assert scheduler.statistics()["busy"] == 0


@pytest.mark.anyio
async def test_close_stops_running_streams(executor: ThreadPoolExecutor) -> None:
    closed = asyncio.Event()

    class Model:
        async def predict(self, inputs):
            try:
                while True:
                    yield 1
                    await asyncio.sleep(0)
            finally:
                closed.set()

    scheduler = direct(Model, executor, stream_buffer=1)
    stream = scheduler.stream(None, None)
    assert await anext(stream) == 1
    await scheduler.close()
    assert closed.is_set()
    assert scheduler.statistics()["busy"] == 0
    await stream.aclose()  # type: ignore[attr-defined]
