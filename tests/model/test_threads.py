"""CallThreads: a sync model's own threads (model/_threads.py), and a sync predict through the
direct scheduler on them: cancellation, predict_concurrency, one thread for a model that is not
thread-safe, batched completion signals."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_until

from podium.config import ModelConfig
from podium.model._threads import CallThreads, _Inbox
from podium.model.native import NativeModel, inspect_class
from podium.runtime.direct import DirectScheduler


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(4, thread_name_prefix="test-threads") as pool:
        yield pool


def direct(cls: type, executor: ThreadPoolExecutor, concurrency: int) -> DirectScheduler:
    config = ModelConfig(name="m", predict_concurrency=concurrency)
    model = NativeModel(
        inspect_class(cls),
        config,
        model_dir=Path("."),
        secrets={},
        executor=executor,
    )
    return DirectScheduler(model, model="m", concurrency=concurrency)


@pytest.mark.anyio
async def test_results_errors_and_threads_as_many_as_calls_at_once() -> None:
    threads = CallThreads("t")
    barrier = threading.Barrier(3, timeout=2)

    def together(x: int) -> int:
        barrier.wait()  # three at once, or BrokenBarrierError
        return x * 2

    assert await asyncio.gather(*(threads.run(together, i) for i in range(3))) == [0, 2, 4]
    assert threads.threads == 3
    assert threads.in_flight == 0
    # one at a time from now on: no more threads
    for i in range(5):
        assert await threads.run(lambda v: v + 1, i) == i + 1
    assert threads.threads == 3
    with pytest.raises(KeyError, match="boom"):
        await threads.run(lambda: {}["boom"])
    await threads.close()
    with pytest.raises(RuntimeError, match="closed"):
        await threads.run(int)


@pytest.mark.anyio
async def test_a_call_still_queued_is_dropped_when_cancelled() -> None:
    threads = CallThreads("t", limit=1)
    events: list[str] = []
    hold = threading.Event()

    def call(name: str) -> str:
        events.append(name)
        if name == "occupier":
            assert hold.wait(2)
        return name

    occupier = asyncio.create_task(threads.run(call, "occupier"))
    await wait_until(lambda: events == ["occupier"])
    queued = asyncio.create_task(threads.run(call, "queued"))
    await asyncio.sleep(0)
    assert threads.in_flight == 2
    queued.cancel()
    with pytest.raises(asyncio.CancelledError):
        await queued  # not held up by the busy thread: it never started
    assert threads.in_flight == 1
    hold.set()
    assert await occupier == "occupier"
    assert await threads.run(call, "next") == "next"
    assert events == ["occupier", "next"]
    assert threads.in_flight == 0
    await threads.close()


@pytest.mark.anyio
async def test_a_running_call_holds_its_caller_until_it_returns() -> None:
    threads = CallThreads("t")
    started, hold = threading.Event(), threading.Event()
    events: list[str] = []

    def call() -> None:
        started.set()
        assert hold.wait(2)
        events.append("returned")

    task = asyncio.create_task(threads.run(call))
    await asyncio.to_thread(started.wait, 2)
    task.cancel()
    await asyncio.sleep(0.01)
    assert not task.done()  # cancelled, yet waiting for the thread
    hold.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert events == ["returned"]
    assert threads.in_flight == 0
    # a second cancellation lets the caller go (a shutdown's cut); the call is still counted
    started.clear()
    hold.clear()
    task = asyncio.create_task(threads.run(call))
    await asyncio.to_thread(started.wait, 2)
    task.cancel()
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert threads.in_flight == 1
    hold.set()
    await wait_until(lambda: threads.in_flight == 0)
    assert events == ["returned", "returned"]
    await threads.close()


@pytest.mark.anyio
async def test_calls_that_finish_together_cost_one_wake_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads: list[int] = []
    real_read = _Inbox.read

    def counting_read(self: _Inbox) -> None:
        reads.append(len(self.done))
        real_read(self)

    monkeypatch.setattr(_Inbox, "read", counting_read)
    threads = CallThreads("t", limit=1)
    hold, last = threading.Event(), threading.Event()
    ran: list[int] = []

    def call(i: int) -> int:
        if i == 0:
            assert hold.wait(2)
        ran.append(i)
        if i == 9:
            last.set()
        return i

    calls = [asyncio.ensure_future(threads.run(call, i)) for i in range(10)]
    await asyncio.sleep(0)  # all ten queued behind the first
    hold.set()
    assert last.wait(2)  # the loop is blocked while the thread runs all ten
    assert await asyncio.gather(*calls) == list(range(10))
    assert reads == [10]  # one wake-up, one read, for the ten
    await threads.close()


@pytest.mark.anyio
async def test_threads_stop_when_closed_or_collected() -> None:
    threads = CallThreads("gone")
    await threads.run(int)
    await threads.close()
    await wait_until(lambda: not [t for t in threading.enumerate() if t.name.startswith("gone-")])

    collected = CallThreads("collected")
    await collected.run(int)
    names = {t.name for t in threading.enumerate() if t.name.startswith("collected-")}
    assert names
    del collected
    gc.collect()
    await wait_until(lambda: not [t for t in threading.enumerate() if t.name in names])


@pytest.mark.anyio
async def test_sync_predict_at_concurrency_one_runs_on_one_thread_one_at_a_time(
    executor: ThreadPoolExecutor,
) -> None:
    seen: list[int] = []
    running = [0, 0]  # now, most

    class Model:
        def predict(self, inputs: Any) -> Any:
            running[0] += 1
            running[1] = max(running)
            seen.append(threading.get_ident())
            threading.Event().wait(0.0005)  # a real wait: other threads could come in
            running[0] -= 1
            return -inputs

    scheduler = direct(Model, executor, concurrency=1)
    results = await asyncio.gather(*(scheduler.infer(i, None) for i in range(50)))
    assert results == [-i for i in range(50)]
    assert running[1] == 1
    assert len(set(seen)) == 1 and seen[0] != threading.get_ident()


@pytest.mark.anyio
async def test_sync_predict_runs_predict_concurrency_at_once_and_no_more(
    executor: ThreadPoolExecutor,
) -> None:
    lock = threading.Lock()
    running = [0, 0]
    threads: set[int] = set()
    barrier = threading.Barrier(3, timeout=2)

    class Model:
        def predict(self, inputs: Any) -> Any:
            with lock:
                running[0] += 1
                running[1] = max(running)
                threads.add(threading.get_ident())
            if inputs < 3:
                barrier.wait()  # the first three together, or BrokenBarrierError
            with lock:
                running[0] -= 1
            return inputs

    scheduler = direct(Model, executor, concurrency=3)
    assert await asyncio.gather(*(scheduler.infer(i, None) for i in range(30))) == list(range(30))
    assert running[1] == 3
    assert len(threads) == 3
    assert scheduler.statistics()["busy"] == 0


@pytest.mark.anyio
async def test_a_request_cancelled_while_waiting_for_the_slot_never_runs(
    executor: ThreadPoolExecutor,
) -> None:
    events: list[str] = []
    hold = threading.Event()

    class Model:
        def predict(self, inputs: Any) -> Any:
            events.append(inputs)
            if inputs == "first":
                assert hold.wait(2)
            return inputs

    scheduler = direct(Model, executor, concurrency=1)
    first = asyncio.create_task(scheduler.infer("first", None))
    await wait_until(lambda: events == ["first"])
    gone = asyncio.create_task(scheduler.infer("gone", None))
    after = asyncio.create_task(scheduler.infer("after", None))
    await wait_until(lambda: scheduler.statistics()["waiting"] == 2)
    gone.cancel()  # the client left while its request waited
    with pytest.raises(asyncio.CancelledError):
        await gone
    hold.set()
    assert (await first, await after) == ("first", "after")
    assert events == ["first", "after"]
    assert scheduler.statistics() == {"slots": 1, "busy": 0, "waiting": 0}


@pytest.mark.anyio
async def test_a_call_runs_in_the_callers_context() -> None:
    """The request id, a sequence's Context and a trace's span are contextvars: a model's sync
    code on these threads must see the caller's values (and its changes stay its own)."""
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    threads = CallThreads()
    try:

        def read_and_change() -> str:
            seen = var.get()
            var.set("changed in the thread")
            return seen

        var.set("the caller's")
        assert await threads.run(read_and_change) == "the caller's"
        assert var.get() == "the caller's"
    finally:
        await threads.close()


@pytest.mark.anyio
async def test_started_withdraw_and_detach_by_the_callers_task() -> None:
    threads = CallThreads("t", limit=1)
    gate = threading.Event()
    ran: list[str] = []

    def work(name: str) -> str:
        ran.append(name)
        if name == "first":
            assert gate.wait(5)
        return name

    first = asyncio.create_task(threads.run(work, "first"))
    await wait_until(lambda: ran == ["first"])
    queued = asyncio.create_task(threads.run(work, "queued"))
    await asyncio.sleep(0)  # it has queued its call
    assert threads.started(first) is not None  # since when it runs
    assert threads.started(queued) is None  # waiting for the one thread
    assert threads.withdraw(first) is False  # a thread has it: it runs on
    # taken back before it started: it never runs, and its caller goes at once
    assert threads.withdraw(queued) is True
    assert threads.in_flight == 1
    queued.cancel()
    with pytest.raises(asyncio.CancelledError):
        await queued
    # detached: the caller of a running call leaves at once when cancelled, and the callback
    # hears when the call really returns
    ended: list[str] = []
    assert threads.detach(first, lambda: ended.append("first")) is True
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert ended == []
    gate.set()
    await wait_until(lambda: ended == ["first"])
    assert ran == ["first"]  # "queued" never ran
    assert threads.in_flight == 0
    # a task that waits for no call here: nothing to detach, nothing to run
    assert threads.started(first) is None
    assert threads.detach(first, lambda: None) is False
    assert await threads.run(work, "after") == "after"
    await threads.close()
