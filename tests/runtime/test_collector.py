"""Collecting requests into batches, on its own: podium.runtime._collector.BatchCollector.

Time is a manual clock, so "closes when the delay expires" is checked to the tick; what a batch
held is read from what the runner was given.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import logging
import warnings
from collections.abc import Callable
from typing import Any

import pytest
from helpers import ManualClock

from podium.errors import BadModelOutput, QueueFull, Unavailable
from podium.runtime._clock import Timer
from podium.runtime._collector import BatchCollector, Pending
from podium.runtime._scheduler import TaskSet

DELAY = 0.25  # s: binary-exact, so the clock lands on it exactly


class Slots:
    """The harness's slots: ``busy`` of ``slots`` taken, the rest waiting in turn."""

    def __init__(self, slots: int) -> None:
        self._free = asyncio.Semaphore(slots)
        self.busy = 0

    async def acquire(self) -> None:
        await self._free.acquire()
        self.busy += 1

    def release(self) -> None:
        self.busy -= 1
        self._free.release()


class CountingClock(ManualClock):
    """A manual clock that counts the timers set on it."""

    def __init__(self) -> None:
        super().__init__()
        self.timers_set = 0

    def call_later(self, delay: float, callback: Callable[[], object]) -> Timer:
        self.timers_set += 1
        return super().call_later(delay, callback)


class EarlyClock(CountingClock):
    """A manual clock whose timers ring ``early`` seconds before they are due (as uvloop's may:
    it counts whole milliseconds)."""

    early = 1 / 1024

    def call_later(self, delay: float, callback: Callable[[], object]) -> Timer:
        return super().call_later(max(delay - self.early, 0.0), callback)


class NeverReached(Exception):
    """What a runner raises for a batch that never reached its slot."""


class Harness:
    """A collector over ``slots`` slots whose runner records each batch and answers with
    ``answer(inputs)`` (doubling by default) once ``release`` is set."""

    def __init__(
        self,
        *,
        size: int = 4,
        delay: float = DELAY,
        limit: int | None = 100,
        slots: int = 1,
        answer: Callable[[list[Any]], Any] = lambda xs: [x * 2 for x in xs],
        clock: CountingClock | None = None,
        placed: Callable[[str], bool] | None = None,
    ) -> None:
        self.clock = clock if clock is not None else CountingClock()
        self.tasks = TaskSet()
        self.gate = Slots(slots)
        self.batches: list[list[Any]] = []
        self.answer = answer
        self.release = asyncio.Event()
        self.release.set()
        self.cancelled = 0
        self.unreached = 0  # batches to fail with NeverReached first
        self.collector: BatchCollector[str] = BatchCollector(
            model="m",
            label="model 'm'",
            size=size,
            delay=delay,
            limit=limit,
            acquire=self.acquire,
            release=lambda _: self.gate.release(),
            run=self.run,
            tasks=self.tasks,
            stopped=lambda: Unavailable("stopped"),
            retry_on=(NeverReached,),
            clock=self.clock,
            placed=placed,
        )

    async def acquire(self) -> str:
        await self.gate.acquire()
        return "slot"

    async def run(self, slot: str, batch: list[Pending]) -> Any:
        try:
            if self.unreached:
                self.unreached -= 1
                raise NeverReached
            self.batches.append([p.inputs for p in batch])
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
            return self.answer([p.inputs for p in batch])
        finally:
            self.gate.release()

    def add(self, *xs: Any) -> list[Pending]:
        return [self.collector.add(x, None) for x in xs]

    async def settle(self) -> None:
        for _ in range(10):
            await asyncio.sleep(0)


def count_wakes(collector: BatchCollector[str]) -> list[int]:
    """A one-item list that counts the collector's wake-ups (its event's ``set``) from now on."""
    wakes = [0]
    arrived = collector._arrived
    set_event = arrived.set

    def counted_set() -> None:
        wakes[0] += 1
        set_event()

    arrived.set = counted_set  # type: ignore[method-assign]
    return wakes


async def results(pending: list[Pending]) -> list[Any]:
    async with asyncio.timeout(2):
        return list(await asyncio.gather(*(p.future for p in pending), return_exceptions=True))


@pytest.mark.anyio
async def test_a_batch_closes_when_full_without_waiting_for_the_delay() -> None:
    h = Harness(size=3)
    try:
        pending = h.add(1, 2, 3)
        assert await results(pending) == [2, 4, 6]  # the clock never moved
        assert h.batches == [[1, 2, 3]] and h.collector.batches_run == 1
        assert all(p.slot == "slot" for p in pending)
    finally:
        await h.tasks.cancel()


@pytest.mark.anyio
async def test_a_placed_batch_counts_as_queued_until_one_before_it_ends() -> None:
    # two slots, the second a place in the worker behind the first (its predict thread busy)
    h = Harness(size=2, slots=2, limit=3, placed=lambda _: h.gate.busy > 1)
    try:
        h.release.clear()
        running = h.add(1, 2)
        await h.settle()
        placed = h.add(3, 4)
        await h.settle()
        assert h.gate.busy == 2 and h.collector.queued == 2  # 3 and 4 still wait
        behind = h.add(5)
        with pytest.raises(QueueFull, match=r"3 requests waiting \(max_queue_size 3\)"):
            h.add(6)
        h.release.set()
        h.clock.advance(DELAY)  # (5 closes alone, on its delay)
        assert await results(running + placed + behind) == [2, 4, 6, 8, 10]
        assert h.collector.queued == 0
    finally:
        await h.tasks.cancel()


@pytest.mark.anyio
async def test_a_batch_closes_exactly_when_the_delay_since_its_first_request_expires() -> None:
    h = Harness(size=8)
    try:
        first = h.add(1)
        await h.settle()
        h.clock.advance(DELAY / 2)
        second = h.add(2)  # arriving later does not push the deadline back
        await h.settle()
        h.clock.advance(DELAY / 2 - 1 / 1024)
        await h.settle()
        assert h.batches == [] and not first[0].future.done()
        h.clock.advance(1 / 1024)  # now exactly DELAY after the first arrived
        assert await results(first + second) == [2, 4]
        assert h.batches == [[1, 2]]
    finally:
        await h.tasks.cancel()


@pytest.mark.anyio
async def test_a_filling_batch_sets_one_timer_and_arrivals_do_not_wake_the_collector() -> None:
    h = Harness(size=4)
    try:
        pending = h.add(1)
        await h.settle()
        wakes = count_wakes(h.collector)
        for x in (2, 3):
            pending += h.add(x)
            await h.settle()
        assert h.batches == [] and wakes == [0] and h.clock.timers_set == 1
        pending += h.add(4)  # the one that fills the batch wakes it, before the delay
        assert await results(pending) == [2, 4, 6, 8]
        assert wakes == [1] and h.clock.timers_set == 1 and h.clock.pending == 0
    finally:
        await h.tasks.cancel()


@pytest.mark.anyio
async def test_arrivals_before_the_woken_collector_runs_wake_it_once() -> None:
    # A server reads a tick's worth of requests, each to add(), before the collector it woke
    # runs: the first one wakes it (an idle collector; then the one that fills the batch), the
    # others find that wake-up pending and add nothing to it.
    h = Harness(size=4)
    try:
        await h.settle()  # the collector waits for a first request
        wakes = count_wakes(h.collector)
        pending = h.add(1, 2, 3)  # in one tick: one wake-up
        assert wakes == [1]
        await h.settle()  # it waits for the batch to fill (one timer)
        pending += h.add(4, 5, 6, 7, 8)  # 4 fills it: one more; 5 to 8, the next batch, none
        assert wakes == [2]
        assert await results(pending) == [2, 4, 6, 8, 10, 12, 14, 16]
        assert h.batches == [[1, 2, 3, 4], [5, 6, 7, 8]] and wakes == [2]
    finally:
        await h.tasks.cancel()


@pytest.mark.anyio
async def test_a_request_joins_without_asking_for_the_running_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # CPython 3.11 asks the kernel for the pid in every get_running_loop(): the collector
    # learns its loop once, when it starts, and makes each request's future on it
    h = Harness(size=4)
    try:
        asked = 0
        get_running_loop = asyncio.get_running_loop

        def counted() -> asyncio.AbstractEventLoop:
            nonlocal asked
            asked += 1
            return get_running_loop()

        monkeypatch.setattr(asyncio, "get_running_loop", counted)
        pending = h.add(1)  # the first starts the collector: it learns the loop there
        first = asked
        pending += h.add(2, 3, 4)
        assert first >= 1 and asked == first
        monkeypatch.undo()
        assert await results(pending) == [2, 4, 6, 8]
    finally:
        await h.tasks.cancel()


@pytest.mark.anyio
async def test_a_delay_timer_that_rings_early_is_set_again_for_the_rest() -> None:
    clock = EarlyClock()
    h = Harness(size=4, clock=clock)
    try:
        pending = h.add(1)
        await h.settle()
        clock.advance(DELAY - clock.early)  # the timer rings, before the delay has passed
        await h.settle()
        assert h.batches == [] and clock.timers_set == 2  # set again for what is left
        clock.advance(clock.early)
        assert await results(pending) == [2]
    finally:
        await h.tasks.cancel()


@pytest.mark.anyio
async def test_requests_that_left_do_not_count_towards_a_full_batch() -> None:
    h = Harness(size=3)
    try:
        a, b = h.add("a", "b")
        await h.settle()
        b.future.cancel()
        (c,) = h.add("c")  # three in the queue, two still waiting: not full
        await h.settle()
        assert h.batches == []
        (d,) = h.add("d")
        assert await results([a, c, d]) == ["aa", "cc", "dd"]
        assert h.batches == [["a", "c", "d"]]
    finally:
        await h.tasks.cancel()


@pytest.mark.anyio
async def test_a_zero_delay_takes_what_is_there() -> None:
    h = Harness(size=8, delay=0.0)
    try:
        assert await results(h.add(5)) == [10]
    finally:
        await h.tasks.cancel()


@pytest.mark.anyio
async def test_a_request_cancelled_while_queued_is_left_out_of_its_batch() -> None:
    h = Harness(size=4)
    try:
        a, b, c = h.add("a", "b", "c")
        await h.settle()
        b.future.cancel()
        h.clock.advance(DELAY)
        assert await results([a, c]) == ["aa", "cc"]
        assert h.batches == [["a", "c"]]
    finally:
        await h.tasks.cancel()


@pytest.mark.anyio
async def test_the_queue_is_bounded_and_a_refusal_changes_nothing() -> None:
    h = Harness(size=8, limit=2)
    try:
        queued = h.add(1, 2)
        with pytest.raises(
            QueueFull, match=r"model 'm' queue is full: 2 requests waiting \(max_queue_size 2\)"
        ):
            h.add(3)
        assert h.collector.queued == 2
        h.clock.advance(DELAY)
        assert await results(queued) == [2, 4]
    finally:
        await h.tasks.cancel()


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (lambda xs: xs[:1], "model 'm' predict returned 1 results for a batch of 2 requests"),
        (
            lambda xs: {"x": xs},
            "model 'm' predict must return a list for a batch of 2 requests, got dict",
        ),
    ],
)
async def test_a_result_that_is_not_one_item_per_request_fails_every_request(
    answer: Callable[[list[Any]], Any], message: str
) -> None:
    h = Harness(size=2, answer=answer)
    try:
        outcome = await results(h.add(1, 2))
        assert all(isinstance(e, BadModelOutput) and e.message == message for e in outcome)
    finally:
        await h.tasks.cancel()


@pytest.mark.anyio
async def test_a_tuple_result_is_accepted() -> None:
    h = Harness(size=2, answer=lambda xs: tuple(xs))
    try:
        assert await results(h.add(1, 2)) == [1, 2]
    finally:
        await h.tasks.cancel()


@pytest.mark.anyio
async def test_a_batch_that_never_reached_its_slot_goes_back_to_the_front_in_order() -> None:
    h = Harness(size=2)
    h.unreached = 1
    try:
        first = h.add(1, 2)
        assert await results(first) == [2, 4]  # run again, same batch
        assert h.batches == [[1, 2]] and h.collector.batches_run == 1
    finally:
        await h.tasks.cancel()


@pytest.mark.anyio
async def test_a_running_batch_is_cancelled_when_its_callers_say_all_left() -> None:
    h = Harness(size=2)
    h.release.clear()
    try:
        first, second = h.add(1, 2)
        await h.settle()
        assert h.batches == [[1, 2]] and h.gate.busy == 1
        first.future.cancel()
        h.collector.left(first)
        await h.settle()
        assert h.cancelled == 0  # one request still waits for it
        second.future.cancel()  # not said: the collector does not watch the futures
        await h.settle()
        assert h.cancelled == 0 and h.gate.busy == 1
        h.collector.left(second)
        await h.settle()
        assert h.cancelled == 1 and h.gate.busy == 0  # and its slot is free
    finally:
        await h.tasks.cancel()


@pytest.mark.anyio
async def test_stopping_fails_the_running_batch_and_the_queued_requests() -> None:
    h = Harness(size=2)
    h.release.clear()
    running = h.add(1, 2)
    await h.settle()
    queued = h.add(3)
    await h.tasks.cancel()  # the owner closes: collector and running batch are cancelled
    h.collector.fail_queued(lambda p: Unavailable(f"stopped before {p.inputs} ran"))
    outcome = await results(running + queued)
    assert [e.message for e in outcome] == ["stopped", "stopped", "stopped before 3 ran"]
    assert h.collector.queued == 0


@pytest.mark.anyio
async def test_stop_ends_collecting_but_lets_running_batches_finish() -> None:
    h = Harness(size=1)
    h.release.clear()
    try:
        running = h.add(1)
        await h.settle()
        h.collector.stop()
        late = h.add(2)
        await h.settle()
        h.release.set()
        assert await results(running) == [2]
        assert not late[0].future.done() and h.batches == [[1]]
    finally:
        await h.tasks.cancel()


@pytest.mark.anyio
async def test_each_request_keeps_its_tag() -> None:
    h = Harness(size=2)
    try:
        pending = [h.collector.add(x, None, tag=f"ctx-{x}") for x in (1, 2)]
        await results(pending)
        assert [p.tag for p in pending] == ["ctx-1", "ctx-2"]
    finally:
        await h.tasks.cancel()


@pytest.mark.anyio
async def test_a_task_set_runs_collectors_in_a_context_of_their_own() -> None:
    asked = contextvars.ContextVar("asked", default="nobody")
    asked.set("r1")
    tasks = TaskSet()
    assert await tasks.spawn(_read(asked)) == "nobody"


@pytest.mark.anyio
async def test_a_logged_task_set_keeps_the_askers_context_names_and_logs_failures(
    caplog: pytest.LogCaptureFixture,
) -> None:
    asked = contextvars.ContextVar("asked", default="nobody")
    asked.set("r1")
    tasks = TaskSet(logging.getLogger("podium.repository"))
    assert await tasks.spawn(_read(asked), "reading") == "r1"

    async def fail() -> None:
        raise RuntimeError("boom")

    with caplog.at_level(logging.ERROR, logger="podium.repository"):
        task = tasks.spawn(fail(), "loading model 'm'")
        assert task.get_name() == "loading model 'm'"
        assert await task is None  # logged, not left for nobody to retrieve
    assert [r.getMessage() for r in caplog.records] == ["loading model 'm' failed: boom"]
    assert not tasks._tasks  # each left the set as it ended


async def _read(var: contextvars.ContextVar[str]) -> str:
    return var.get()


@pytest.mark.anyio
async def test_a_logged_task_cancelled_before_it_ran_leaves_no_coroutine_unawaited() -> None:
    ran = []

    async def work() -> None:
        ran.append(True)

    tasks = TaskSet(logging.getLogger("podium.repository"))
    coro = work()
    tasks.spawn(coro, "restarting a worker")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "coroutine ... was never awaited" would be an error
        await tasks.cancel()
        gc.collect()
    assert ran == []
    assert coro.cr_frame is None  # closed, not left for the garbage collector to report
