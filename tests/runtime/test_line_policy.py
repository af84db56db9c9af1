"""The queue policy of a waiting line (podium.runtime._line.QueuePolicy): deadlines (the model's
``max_queue_delay`` and the request's own) and priority levels with aging.

Time is a ManualClock: what is judged is who was refused, who was handed which value, and in
which order, never how fast.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from podium.errors import InvalidInput, QueueTimeout, http_status
from podium.runtime._line import Line, QueuePolicy
from podium.types import RequestInfo, current_request
from tests.helpers import ManualClock


class Owner:
    """Hands values as a gate does; ``free`` keeps what nobody waited for."""

    def __init__(self, policy: QueuePolicy, limit: int | None = None) -> None:
        self.line: Line[Any] = Line(self.release, limit, policy)
        self.free: list[Any] = []

    def release(self, value: Any) -> None:
        if not self.line.hand(value):
            self.free.append(value)


def policy(clock: ManualClock, **kwargs: Any) -> QueuePolicy:
    return QueuePolicy("m", clock=clock, **kwargs)


async def wait_as(line: Line[Any], priority: int = 0, deadline: float | None = None) -> Any:
    """``line.wait()`` as a request that asked for ``priority`` and ``deadline``."""
    info = RequestInfo("r")
    info.priority = priority
    info.deadline = deadline
    current_request.set(info)  # this task's own context
    return await line.wait()


async def in_line(line: Line[Any], *requests: tuple[int, float | None]) -> list[asyncio.Task[Any]]:
    tasks = []
    for priority, deadline in requests:
        tasks.append(asyncio.create_task(wait_as(line, priority, deadline)))
        await asyncio.sleep(0)  # in line now, in this order
    return tasks


@pytest.mark.anyio
async def test_a_waiter_past_max_wait_is_refused_and_takes_nothing() -> None:
    clock = ManualClock()
    owner = Owner(policy(clock, max_wait=0.5))
    first, second = await in_line(owner.line, (0, None), (0, None))
    clock.advance(0.4)
    assert not first.done()
    owner.release("slot-1")  # the first is served before its deadline
    assert await first == "slot-1"
    clock.advance(0.2)  # the second has waited 0.6 s now
    await asyncio.sleep(0)
    with pytest.raises(QueueTimeout) as info:
        await second
    assert http_status(info.value) == 503 and info.value.retry_after == 1.0
    assert "waited 500 ms" in info.value.message  # refused at its deadline, by its timer
    assert not owner.line and owner.line.waiting == 0  # the line lets newcomers pass again
    owner.release("slot-2")
    assert owner.free == ["slot-2"]  # nobody was handed it: not lost
    assert clock.pending == 0  # the served waiter's timer was cancelled


@pytest.mark.anyio
async def test_the_request_deadline_shortens_the_models_wait_never_lengthens_it() -> None:
    clock = ManualClock(100.0)
    owner = Owner(policy(clock, max_wait=10.0))
    short, long_ = await in_line(owner.line, (0, 100.2), (0, 500.0))
    clock.advance(0.3)
    await asyncio.sleep(0)
    with pytest.raises(QueueTimeout):
        await short
    assert not long_.done()
    clock.advance(9.8)  # 10.1 s: past the model's max_wait, before the request's own
    await asyncio.sleep(0)
    with pytest.raises(QueueTimeout):
        await long_


@pytest.mark.anyio
async def test_a_request_whose_deadline_has_passed_is_refused_without_waiting() -> None:
    clock = ManualClock(50.0)
    owner = Owner(policy(clock))
    with pytest.raises(QueueTimeout):
        await wait_as(owner.line, deadline=49.0)
    assert len(owner.line) == 0 and clock.pending == 0


@pytest.mark.anyio
async def test_no_deadline_no_timer() -> None:
    clock = ManualClock()
    owner = Owner(policy(clock))  # max_wait 0: no limit
    (task,) = await in_line(owner.line, (0, None))
    assert clock.pending == 0
    owner.release("v")
    assert await task == "v"


@pytest.mark.anyio
async def test_a_higher_level_is_handed_first_oldest_first_within_a_level() -> None:
    clock = ManualClock()
    owner = Owner(policy(clock, levels=3, default=2, aging=60.0))
    low, mid_a, default, high, mid_b = await in_line(
        owner.line, (3, None), (2, None), (0, None), (1, None), (2, None)
    )
    for n in range(5):
        owner.release(n)
    got = [await task for task in (high, mid_a, default, mid_b, low)]
    assert got == [0, 1, 2, 3, 4]


@pytest.mark.anyio
async def test_aging_lifts_a_waiter_so_no_level_starves() -> None:
    # The rule: a waiter rises one level per `aging` seconds waited (up to the top); equal
    # levels go by arrival. A level-3 waiter passes fresh level-1 waiters after 2 × aging.
    clock = ManualClock()
    owner = Owner(policy(clock, levels=3, aging=1.0))
    (low,) = await in_line(owner.line, (3, None))
    order = []
    for step in range(4):
        (high,) = await in_line(owner.line, (1, None))
        owner.release(step)
        await asyncio.sleep(0)
        order.append("low" if low.done() else "high")
        if low.done():
            break
        assert await high == step
        clock.advance(0.75)
    # waited 0, 0.75, 1.5 s: level 3, 3, 2; at 2.25 s it is level 1, older than the newcomer
    assert order == ["high", "high", "high", "low"]
    assert await low == 3


@pytest.mark.anyio
async def test_a_priority_outside_the_levels_is_invalid_input() -> None:
    clock = ManualClock()
    owner = Owner(policy(clock, levels=2))
    with pytest.raises(
        InvalidInput, match=r"priority levels 1-2 \(1 the highest\), got priority 3"
    ):
        await wait_as(owner.line, priority=3)
    assert len(owner.line) == 0


@pytest.mark.anyio
async def test_cancelled_and_refused_waiters_are_skipped_across_levels() -> None:
    clock = ManualClock()
    owner = Owner(policy(clock, levels=2, max_wait=1.0))
    high, low, late = await in_line(owner.line, (1, None), (2, None), (2, None))
    high.cancel()
    await asyncio.sleep(0)
    owner.release("a")
    assert await low == "a"
    clock.advance(2.0)
    await asyncio.sleep(0)
    with pytest.raises(QueueTimeout):
        await late
    assert not owner.line
    owner.release("b")
    assert owner.free == ["b"]


@pytest.mark.anyio
async def test_failing_all_clears_every_level() -> None:
    clock = ManualClock()
    owner = Owner(policy(clock, levels=2))
    tasks = await in_line(owner.line, (1, None), (2, None))
    owner.line.fail_all(lambda: RuntimeError("gone"))
    for task in tasks:
        with pytest.raises(RuntimeError):
            await task
    owner.release("v")
    assert owner.free == ["v"]


def test_retry_after_is_the_longest_wait_rounded_up_at_least_a_second() -> None:
    assert QueuePolicy("m").retry_after() == 1.0
    assert QueuePolicy("m", max_wait=2.2).retry_after() == 3.0


@pytest.mark.anyio
async def test_a_newcomer_that_would_wait_past_its_deadline_is_refused_at_once() -> None:
    # The line's pace is the time between two values handed while waiters remained; a newcomer
    # with n waiters ahead expects (n + 1) × pace and is refused now if that is past its deadline.
    clock = ManualClock()
    owner = Owner(policy(clock, max_wait=1.0))
    first, second, third = await in_line(owner.line, (0, None), (0, None), (0, None))
    clock.advance(0.25)
    owner.release("a")  # the line was not full before: no pace yet
    clock.advance(0.25)
    owner.release("b")  # 0.25 s after the last, waiters remaining: the pace is 0.25 s
    assert [await first, await second] == ["a", "b"]
    admitted = await in_line(owner.line, (0, None), (0, None), (0, None))  # 1, 2, 3 ahead
    with pytest.raises(QueueTimeout, match="would wait about 1250 ms in its queue") as info:
        await wait_as(owner.line)  # 4 ahead: 1.25 s > 1 s
    assert info.value.retry_after == 1.0
    assert len(owner.line) == 4  # it never joined
    # a request with a later deadline of its own is still bound by the model's max_wait; one
    # that asks for less is refused sooner
    with pytest.raises(QueueTimeout):
        await wait_as(owner.line, deadline=clock.now() + 0.4)
    for value, task in zip("cdef", (third, *admitted), strict=True):
        owner.release(value)
        assert await task == value


@pytest.mark.anyio
async def test_a_line_that_empties_at_each_hand_has_no_pace_and_refuses_nobody_early() -> None:
    clock = ManualClock()
    owner = Owner(policy(clock, max_wait=0.1))
    for n in range(3):  # one waiter at a time, each handed a value before the next comes
        (task,) = await in_line(owner.line, (0, None))
        clock.advance(0.05)
        owner.release(n)
        assert await task == n
        clock.advance(10.0)  # long idle gaps: not the line's pace
    waiters = await in_line(owner.line, (0, None), (0, None), (0, None))
    assert len(owner.line) == 3  # none refused on arrival
    for n, task in enumerate(waiters):
        owner.release(n)
        assert await task == n
