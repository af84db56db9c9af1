"""Dynamic batching: podium.runtime.batcher.BatchScheduler.

What a batch held is read from the calls the model records, never from how long anything took.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from helpers import ManualClock, wait_until
from starlette.requests import Request

from podium.config import ModelConfig
from podium.errors import (
    BadModelOutput,
    ModelError,
    QueueFull,
    QueueTimeout,
    Unavailable,
    http_status,
)
from podium.model.native import NativeModel, inspect_class
from podium.runtime._clock import SYSTEM_CLOCK, Clock
from podium.runtime._line import QueuePolicy
from podium.runtime.batcher import BatchScheduler
from podium.types import RequestInfo, current_request

LONG = 60_000.0  # ms: a delay no test waits for; such a batch can only close by being full


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(8, thread_name_prefix="test-model") as pool:
        yield pool


async def batcher(
    cls: type,
    executor: ThreadPoolExecutor,
    *,
    name: str = "m",
    batch_size: int = 4,
    max_batch_delay_ms: float = LONG,
    max_queue_size: int = 100,
    concurrency: int = 1,
    clock: Clock = SYSTEM_CLOCK,
    max_queue_delay_ms: float = 0.0,
    priority: QueuePolicy | None = None,
) -> BatchScheduler:
    instance = NativeModel(
        inspect_class(cls),
        ModelConfig(name=name),
        model_dir=Path("."),
        secrets={},
        executor=executor,
    )
    scheduler = BatchScheduler(
        instance,
        model=name,
        batch_size=batch_size,
        max_batch_delay_ms=max_batch_delay_ms,
        max_queue_size=max_queue_size,
        concurrency=concurrency,
        clock=clock,
        max_queue_delay_ms=max_queue_delay_ms,
        priority=priority,
    )
    await scheduler.start()
    return scheduler


def doubler(batches: list[list[Any]]) -> type:
    class Model:
        async def predict(self, inputs):
            batches.append(list(inputs))
            return [x * 2 for x in inputs]

    return Model


async def gather_within(*aws: Any) -> list[Any]:
    async with asyncio.timeout(2):
        return list(await asyncio.gather(*aws))


async def gather_within_exc(*aws: Any) -> list[Any]:
    async with asyncio.timeout(2):
        return list(await asyncio.gather(*aws, return_exceptions=True))


# -- forming batches -----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_batch_closes_when_full(executor: ThreadPoolExecutor) -> None:
    batches: list[list[Any]] = []
    scheduler = await batcher(doubler(batches), executor, batch_size=3)
    try:
        # the delay is a minute: these complete only because the batch closes when full
        assert await gather_within(*(scheduler.infer(i, None) for i in (1, 2, 3))) == [2, 4, 6]
        assert batches == [[1, 2, 3]]
        assert scheduler.statistics()["batches"] == 1
    finally:
        await scheduler.close()


@pytest.mark.anyio
async def test_a_batch_closes_when_the_delay_expires(executor: ThreadPoolExecutor) -> None:
    batches: list[list[Any]] = []
    scheduler = await batcher(doubler(batches), executor, batch_size=8, max_batch_delay_ms=20)
    try:
        assert await gather_within(scheduler.infer(5, None), scheduler.infer(6, None)) == [10, 12]
        assert batches == [[5, 6]]
    finally:
        await scheduler.close()


@pytest.mark.anyio
async def test_the_delay_is_exact_on_the_schedulers_clock(executor: ThreadPoolExecutor) -> None:
    batches: list[list[Any]] = []
    clock = ManualClock()
    scheduler = await batcher(
        doubler(batches), executor, batch_size=8, max_batch_delay_ms=125, clock=clock
    )
    try:
        first = asyncio.create_task(scheduler.infer(5, None))
        await wait_until(lambda: scheduler.statistics()["queued"] == 1)
        clock.advance(0.125 - 1 / 1024)
        second = asyncio.create_task(scheduler.infer(6, None))
        await wait_until(lambda: scheduler.statistics()["queued"] == 2)
        await asyncio.sleep(0.01)
        assert batches == []
        clock.advance(1 / 1024)  # max_batch_delay after the first request
        assert await gather_within(first, second) == [10, 12]
        assert batches == [[5, 6]]
    finally:
        await scheduler.close()


@pytest.mark.anyio
async def test_zero_delay_takes_what_is_there(executor: ThreadPoolExecutor) -> None:
    batches: list[list[Any]] = []
    scheduler = await batcher(doubler(batches), executor, batch_size=8, max_batch_delay_ms=0)
    try:
        assert await gather_within(scheduler.infer(1, None)) == [2]
        assert batches == [[1]]
    finally:
        await scheduler.close()


@pytest.mark.anyio
async def test_each_request_gets_its_own_result(executor: ThreadPoolExecutor) -> None:
    batches: list[list[Any]] = []

    class Model:
        async def predict(self, inputs):
            batches.append(list(inputs))
            await asyncio.sleep(0.001)
            return [f"result of {x}" for x in inputs]

    scheduler = await batcher(Model, executor, batch_size=4, max_batch_delay_ms=5)
    try:
        results = await gather_within(*(scheduler.infer(i, None) for i in range(10)))
        assert results == [f"result of {i}" for i in range(10)]
        assert [x for batch in batches for x in batch] == list(range(10))  # arrival order
        assert all(1 <= len(batch) <= 4 for batch in batches)
        assert [len(b) for b in batches[:2]] == [4, 4]
    finally:
        await scheduler.close()


@pytest.mark.anyio
async def test_more_than_a_batch_waiting(executor: ThreadPoolExecutor) -> None:
    batches: list[list[Any]] = []
    release = asyncio.Event()

    class Model:
        async def predict(self, inputs):
            batches.append(list(inputs))
            await release.wait()
            return list(inputs)

    scheduler = await batcher(Model, executor, batch_size=2, concurrency=1)
    try:
        tasks = [asyncio.create_task(scheduler.infer(i, None)) for i in range(5)]
        await wait_until(lambda: len(batches) == 1 and scheduler.statistics()["queued"] == 3)
        release.set()
        assert await gather_within(*tasks[:4]) == [0, 1, 2, 3]
        # the fifth waits for its batch to fill (the delay is a minute), then goes with the sixth
        assert not tasks[4].done()
        assert await gather_within(tasks[4], scheduler.infer(5, None)) == [4, 5]
        assert batches == [[0, 1], [2, 3], [4, 5]]
    finally:
        await scheduler.close()


@pytest.mark.anyio
async def test_sync_predict_gets_the_batch_in_the_pool(executor: ThreadPoolExecutor) -> None:
    threads: list[int] = []

    class Model:
        def predict(self, inputs):
            threads.append(threading.get_ident())
            return [sum(x) for x in inputs]

    scheduler = await batcher(Model, executor, batch_size=2)
    try:
        assert await gather_within(scheduler.infer([1, 2], None), scheduler.infer([3], None)) == [
            3,
            3,
        ]
        assert len(threads) == 1 and threads[0] != threading.get_ident()
    finally:
        await scheduler.close()


@pytest.mark.anyio
async def test_concurrency_bounds_running_batches(executor: ThreadPoolExecutor) -> None:
    running = {"now": 0, "peak": 0}
    batches: list[list[Any]] = []

    class Model:
        async def predict(self, inputs):
            running["now"] += 1
            running["peak"] = max(running["peak"], running["now"])
            batches.append(list(inputs))
            await asyncio.sleep(0.01)
            running["now"] -= 1
            return list(inputs)

    scheduler = await batcher(Model, executor, batch_size=2, concurrency=2)
    try:
        results = await gather_within(*(scheduler.infer(i, None) for i in range(8)))
        assert results == list(range(8))
        assert running["peak"] == 2
        assert sorted(x for b in batches for x in b) == list(range(8))
    finally:
        await scheduler.close()


# -- per-request steps and the request objects ---------------------------------------------------


@pytest.mark.anyio
async def test_preprocess_and_postprocess_run_per_request(executor: ThreadPoolExecutor) -> None:
    calls: list[tuple[str, Any]] = []

    class Model:
        def preprocess(self, inputs):
            calls.append(("pre", inputs))
            return inputs + 1

        async def predict(self, inputs):
            calls.append(("predict", list(inputs)))
            return [x * 10 for x in inputs]

        async def postprocess(self, outputs):
            calls.append(("post", outputs))
            return -outputs

    scheduler = await batcher(Model, executor, batch_size=3)
    try:
        assert await gather_within(*(scheduler.infer(i, None) for i in (1, 2, 3))) == [
            -20,
            -30,
            -40,
        ]
        pre = [v for k, v in calls if k == "pre"]
        post = [v for k, v in calls if k == "post"]
        assert sorted(pre) == [1, 2, 3]
        assert [v for k, v in calls if k == "predict"] == [[2, 3, 4]]
        assert sorted(post) == [20, 30, 40]
        kinds = [k for k, _ in calls]
        assert kinds.index("predict") == 3  # after every preprocess, before every postprocess
    finally:
        await scheduler.close()


@pytest.mark.anyio
async def test_predict_gets_the_list_of_requests(executor: ThreadPoolExecutor) -> None:
    seen: dict[str, Any] = {}

    class Model:
        async def preprocess(self, inputs, request: Request):
            seen.setdefault("pre", []).append(request)
            return inputs

        def predict(self, inputs, request: Request):
            seen["predict"] = request
            return list(inputs)

        def postprocess(self, outputs, request: Request):
            seen.setdefault("post", []).append(request)
            return outputs

    scheduler = await batcher(Model, executor, batch_size=2)
    first, second = object(), object()
    try:
        assert await gather_within(scheduler.infer("a", first), scheduler.infer("b", second)) == [
            "a",
            "b",
        ]
        assert isinstance(seen["predict"], list)
        assert len(seen["predict"]) == 2
        assert seen["predict"][0] is first and seen["predict"][1] is second
        assert {id(r) for r in seen["pre"]} == {id(first), id(second)}
        assert {id(r) for r in seen["post"]} == {id(first), id(second)}
    finally:
        await scheduler.close()


@pytest.mark.anyio
async def test_stream_yields_the_one_result(executor: ThreadPoolExecutor) -> None:
    scheduler = await batcher(doubler([]), executor, batch_size=1, max_batch_delay_ms=0)
    try:
        stream: AsyncIterator[Any] = scheduler.stream(21, None)
        async with asyncio.timeout(2):
            assert [x async for x in stream] == [42]
    finally:
        await scheduler.close()


# -- wrong outputs and errors --------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(("returned", "length"), [([1], 1), ([1, 2, 3], 3), ([], 0)])
async def test_wrong_length_fails_every_request(
    executor: ThreadPoolExecutor, returned: list[Any], length: int
) -> None:
    class Model:
        async def predict(self, inputs):
            return returned

    scheduler = await batcher(Model, executor, name="clf", batch_size=2)
    try:
        results = await gather_within_exc(scheduler.infer("a", None), scheduler.infer("b", None))
    finally:
        await scheduler.close()
    assert len(results) == 2
    for exc in results:
        assert isinstance(exc, BadModelOutput) and isinstance(exc, ModelError)
        assert http_status(exc) == 500
        assert "model 'clf'" in exc.message
        assert f"returned {length} results for a batch of 2 requests" in exc.message


@pytest.mark.anyio
@pytest.mark.parametrize("returned", [None, "ab", {"a": 1, "b": 2}, 7])
async def test_a_non_list_fails_every_request(executor: ThreadPoolExecutor, returned: Any) -> None:
    class Model:
        async def predict(self, inputs):
            return returned

    scheduler = await batcher(Model, executor, name="clf", batch_size=2)
    try:
        results = await gather_within_exc(scheduler.infer(1, None), scheduler.infer(2, None))
    finally:
        await scheduler.close()
    for exc in results:
        assert isinstance(exc, BadModelOutput)
        assert "model 'clf' predict must return a list for a batch of 2 requests" in exc.message
        assert type(returned).__name__ in exc.message


@pytest.mark.anyio
async def test_tuple_output_is_accepted(executor: ThreadPoolExecutor) -> None:
    class Model:
        async def predict(self, inputs):
            return tuple(x + 1 for x in inputs)

    scheduler = await batcher(Model, executor, batch_size=2)
    try:
        assert await gather_within(scheduler.infer(1, None), scheduler.infer(2, None)) == [2, 3]
    finally:
        await scheduler.close()


@pytest.mark.anyio
async def test_model_exception_fails_the_batch_not_the_scheduler(
    executor: ThreadPoolExecutor,
) -> None:
    class Model:
        def predict(self, inputs):
            if "boom" in inputs:
                raise RuntimeError("bad batch")
            return list(inputs)

    scheduler = await batcher(Model, executor, name="clf", batch_size=2)
    try:
        results = await gather_within_exc(scheduler.infer("boom", None), scheduler.infer(1, None))
        for exc in results:
            assert isinstance(exc, ModelError)
            assert exc.message == "model 'clf' predict raised RuntimeError: bad batch"
        assert await gather_within(scheduler.infer(3, None), scheduler.infer(4, None)) == [3, 4]
        assert scheduler.statistics()["busy"] == 0
    finally:
        await scheduler.close()


# -- the queue -----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_full_queue_refuses_at_once(executor: ThreadPoolExecutor) -> None:
    batches: list[list[Any]] = []
    release = asyncio.Event()

    class Model:
        async def predict(self, inputs):
            batches.append(list(inputs))
            await release.wait()
            return list(inputs)

    scheduler = await batcher(Model, executor, name="busy", batch_size=2, max_queue_size=2)
    try:
        running = [asyncio.create_task(scheduler.infer(i, None)) for i in range(2)]
        await wait_until(lambda: batches == [[0, 1]])
        queued = [asyncio.create_task(scheduler.infer(i, None)) for i in range(2, 4)]
        await wait_until(lambda: scheduler.statistics()["queued"] == 2)
        async with asyncio.timeout(1):
            with pytest.raises(QueueFull) as info:
                await scheduler.infer("refused", None)
        assert isinstance(info.value, Unavailable) and http_status(info.value) == 503
        assert "model 'busy'" in info.value.message
        assert "max_queue_size 2" in info.value.message
        release.set()
        assert await gather_within(*running, *queued) == [0, 1, 2, 3]
        assert batches == [[0, 1], [2, 3]]
    finally:
        await scheduler.close()


def holding(batches: list[list[Any]], release: asyncio.Event, first: Any = None) -> type:
    """A model that records each batch and holds it until ``release`` is set (only the batch
    that starts with ``first``, when given)."""

    class Model:
        async def predict(self, inputs):
            batches.append(list(inputs))
            if first is None or inputs[0] == first:
                await release.wait()
            return list(inputs)

    return Model


@pytest.mark.anyio
async def test_requests_past_max_queue_delay_are_refused_unrun(
    executor: ThreadPoolExecutor,
) -> None:
    batches: list[list[Any]] = []
    release = asyncio.Event()
    clock = ManualClock()
    scheduler = await batcher(
        holding(batches, release),
        executor,
        name="late",
        batch_size=2,
        max_queue_delay_ms=100,
        clock=clock,
    )
    try:
        running = [asyncio.create_task(scheduler.infer(i, None)) for i in range(2)]
        await wait_until(lambda: batches == [[0, 1]])
        late = [asyncio.create_task(scheduler.infer(i, None)) for i in (2, 3)]
        await wait_until(lambda: scheduler.statistics()["queued"] == 2)
        clock.advance(0.2)  # 2 and 3 (the batch formed ahead) waited past 100 ms
        fresh = asyncio.create_task(scheduler.infer(4, None))
        await wait_until(lambda: scheduler.statistics()["queued"] == 3)
        release.set()
        assert await gather_within(*running, fresh) == [0, 1, 4]
        for task in late:
            with pytest.raises(QueueTimeout) as info:
                await task
            assert http_status(info.value) == 503 and info.value.retry_after == 1.0
        assert batches == [[0, 1], [4]]  # the late ones never reached the model
    finally:
        await scheduler.close()


async def infer_as(
    scheduler: BatchScheduler, x: Any, priority: int = 0, deadline: float | None = None
) -> Any:
    """``scheduler.infer(x)`` as a request that asked for ``priority`` and must have left the
    queue by ``deadline`` (on the scheduler's clock)."""
    info = RequestInfo("r")
    info.priority = priority
    info.deadline = deadline
    current_request.set(info)  # this task's own context
    return await scheduler.infer(x, None)


@pytest.mark.anyio
async def test_a_request_past_its_own_deadline_is_refused_unrun_without_max_queue_delay(
    executor: ThreadPoolExecutor,
) -> None:
    batches: list[list[Any]] = []
    release = asyncio.Event()
    clock = ManualClock()
    scheduler = await batcher(holding(batches, release), executor, batch_size=2, clock=clock)
    try:
        running = [asyncio.create_task(scheduler.infer(i, None)) for i in range(2)]
        await wait_until(lambda: batches == [[0, 1]])
        late = asyncio.create_task(infer_as(scheduler, 2, deadline=0.1))
        patient = asyncio.create_task(scheduler.infer(3, None))  # no deadline of its own
        await wait_until(lambda: scheduler.statistics()["queued"] == 2)
        clock.advance(0.2)  # past the one request's own deadline
        release.set()
        assert await gather_within(*running) == [0, 1]
        with pytest.raises(QueueTimeout):
            await late
        assert await gather_within(patient) == [3]
        assert batches == [[0, 1], [3]]  # the late one never reached the model
    finally:
        await scheduler.close()


@pytest.mark.anyio
async def test_a_batch_takes_the_highest_levels_first(executor: ThreadPoolExecutor) -> None:
    batches: list[list[Any]] = []
    release = asyncio.Event()
    clock = ManualClock()
    levels = QueuePolicy("m", levels=3, default=2, aging=60.0)
    scheduler = await batcher(
        holding(batches, release, "x0"), executor, batch_size=2, clock=clock, priority=levels
    )
    try:
        running = [asyncio.create_task(scheduler.infer(x, None)) for x in ("x0", "x1")]
        await wait_until(lambda: batches == [["x0", "x1"]])
        # all three queued in one turn: the next batch takes two of them by level
        waiting = [
            asyncio.create_task(infer_as(scheduler, x, p))
            for x, p in (("low", 3), ("default", 0), ("high", 1))
        ]
        await wait_until(lambda: scheduler.statistics()["queued"] == 3)
        release.set()
        assert await gather_within(*running) == ["x0", "x1"]
        await wait_until(lambda: len(batches) == 2)
        clock.advance(LONG / 1000)  # the last one's batch closes by its delay
        assert await gather_within(*waiting) == ["low", "default", "high"]
        assert batches == [["x0", "x1"], ["high", "default"], ["low"]]
    finally:
        await scheduler.close()


@pytest.mark.anyio
async def test_a_cancelled_request_is_left_out_of_the_batch(executor: ThreadPoolExecutor) -> None:
    batches: list[list[Any]] = []
    release = asyncio.Event()

    class Model:
        async def predict(self, inputs):
            batches.append(list(inputs))
            await release.wait()
            return list(inputs)

    scheduler = await batcher(Model, executor, batch_size=3, max_batch_delay_ms=20)
    try:
        first = [asyncio.create_task(scheduler.infer(x, None)) for x in "abc"]
        await wait_until(lambda: batches == [["a", "b", "c"]])
        queued = {x: asyncio.create_task(scheduler.infer(x, None)) for x in "def"}
        await wait_until(lambda: scheduler.statistics()["queued"] == 3)
        queued["e"].cancel()
        with pytest.raises(asyncio.CancelledError):
            await queued["e"]
        release.set()
        assert await gather_within(*first, queued["d"], queued["f"]) == list("abcdf")
        assert batches == [["a", "b", "c"], ["d", "f"]]
    finally:
        await scheduler.close()


@pytest.mark.anyio
async def test_a_batch_whose_clients_all_left_is_cancelled(executor: ThreadPoolExecutor) -> None:
    events: list[str] = []
    started = asyncio.Event()

    class Model:
        async def predict(self, inputs):
            events.append("start")
            started.set()
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                events.append("cancelled")
                raise
            return list(inputs)

    scheduler = await batcher(Model, executor, batch_size=2)
    try:
        tasks = [asyncio.create_task(scheduler.infer(i, None)) for i in range(2)]
        await asyncio.wait_for(started.wait(), 2)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await wait_until(lambda: events == ["start", "cancelled"])
        await wait_until(lambda: scheduler.statistics()["busy"] == 0)
    finally:
        await scheduler.close()


@pytest.mark.anyio
async def test_close_fails_the_requests_still_waiting(executor: ThreadPoolExecutor) -> None:
    release = asyncio.Event()
    batches: list[list[Any]] = []

    class Model:
        async def predict(self, inputs):
            batches.append(list(inputs))
            await release.wait()
            return list(inputs)

    scheduler = await batcher(Model, executor, name="m", batch_size=2)
    running = [asyncio.create_task(scheduler.infer(i, None)) for i in range(2)]
    await wait_until(lambda: len(batches) == 1)
    queued = asyncio.create_task(scheduler.infer(2, None))
    await wait_until(lambda: scheduler.statistics()["queued"] == 1)
    await scheduler.close()
    # nobody is left waiting forever: the running batch and the queued request both fail
    results = await gather_within_exc(*running, queued)
    for exc in results:
        assert isinstance(exc, Unavailable), exc
        assert "model 'm'" in exc.message
    with pytest.raises(Unavailable, match="model 'm'"):
        await scheduler.infer(3, None)


# -- pipelining: the next batch waits for the slot, formed ------------------------------------


@pytest.mark.anyio
async def test_the_next_batch_runs_before_the_answers_of_the_one_that_freed_the_slot(
    executor: ThreadPoolExecutor,
) -> None:
    events: list[Any] = []
    release = asyncio.Event()

    class Model:
        async def predict(self, inputs):
            events.append(("start", list(inputs)))
            if inputs[0] == 0:
                await release.wait()
            return list(inputs)

    async def call(i: int) -> None:
        await scheduler.infer(i, None)
        events.append(("answered", i))

    scheduler = await batcher(Model, executor, batch_size=2)
    try:
        calls = [asyncio.create_task(call(i)) for i in range(2)]
        await wait_until(lambda: events == [("start", [0, 1])])
        calls += [asyncio.create_task(call(i)) for i in range(2, 4)]
        await wait_until(lambda: scheduler.statistics()["queued"] == 2)
        release.set()
        await gather_within(*calls)
        # the model is handed the next batch the moment it is free, not after the server
        # has delivered the answers of the batch it just finished
        assert events[:2] == [("start", [0, 1]), ("start", [2, 3])]
        assert sorted(events[2:]) == [("answered", i) for i in range(4)]
    finally:
        await scheduler.close()


@pytest.mark.anyio
async def test_requests_arriving_while_the_next_batch_waits_join_it(
    executor: ThreadPoolExecutor,
) -> None:
    batches: list[list[Any]] = []
    release = asyncio.Event()

    class Model:
        async def predict(self, inputs):
            batches.append(list(inputs))
            if inputs[0] == 0:
                await release.wait()
            return list(inputs)

    scheduler = await batcher(Model, executor, batch_size=4, max_batch_delay_ms=1)
    try:
        first = [asyncio.create_task(scheduler.infer(i, None)) for i in range(4)]
        await wait_until(lambda: batches == [[0, 1, 2, 3]])
        second = [asyncio.create_task(scheduler.infer(i, None)) for i in (4, 5)]
        await asyncio.sleep(0.02)  # its delay is over: formed, it waits for the slot
        gone = asyncio.create_task(scheduler.infer("gone", None))
        late = [asyncio.create_task(scheduler.infer(i, None)) for i in (6, 7, 8)]
        await wait_until(lambda: scheduler.statistics()["queued"] == 6)
        gone.cancel()  # its client left: it is not in the batch
        release.set()
        assert await gather_within(*first, *second, *late) == list(range(9))
        assert batches == [[0, 1, 2, 3], [4, 5, 6, 7], [8]]
    finally:
        await scheduler.close()
