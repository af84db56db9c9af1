"""The one waiting line under every gate and turn: podium.runtime._line.Line.

Order, hand-off, the cancellation races (before and after a value is handed), failure, bounds
and statistics, each judged by which waiter got which value and what came back to the owner.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from podium.runtime._line import Line, LineStatistics


class Owner:
    """Counts free values as a gate does: ``release`` hands a value to the next waiter, or keeps
    it; ``back`` records every value the line gave back."""

    def __init__(self, limit: int | None = None) -> None:
        self.line: Line[Any] = Line(self.release, limit)
        self.free: list[Any] = []
        self.back: list[Any] = []

    def release(self, value: Any) -> None:
        self.back.append(value)
        if not self.line.hand(value):
            self.free.append(value)


async def within(awaitable: Any) -> Any:
    """``await awaitable``, failing in 2 s instead of hanging (a value lost in the line)."""
    async with asyncio.timeout(2):
        return await awaitable


async def waiters(line: Line[Any], n: int) -> list[asyncio.Task[Any]]:
    tasks = [asyncio.create_task(line.wait()) for _ in range(n)]
    await asyncio.sleep(0)  # each is in line now, in creation order
    return tasks


@pytest.mark.anyio
async def test_values_go_to_the_waiters_in_arrival_order() -> None:
    owner = Owner()
    tasks = await waiters(owner.line, 3)
    assert owner.line.waiting == 3 and owner.line
    for value in ("a", "b", "c"):
        assert owner.line.hand(value)
    assert [await within(t) for t in tasks] == ["a", "b", "c"]
    assert not owner.line and owner.back == []


@pytest.mark.anyio
async def test_hand_with_nobody_waiting_gives_nothing() -> None:
    owner = Owner()
    assert not owner.line.hand("x")
    assert owner.line.waiting == 0 and not owner.line


@pytest.mark.anyio
async def test_a_waiter_cancelled_before_the_hand_off_leaves_and_takes_nothing() -> None:
    owner = Owner()
    first, second = await waiters(owner.line, 2)
    first.cancel()
    assert owner.line.waiting == 1  # counted out at once, before it has run
    with pytest.raises(asyncio.CancelledError):
        await first
    assert len(owner.line) == 1  # and out of the line once it ran
    assert owner.line.hand("v")
    assert await within(second) == "v"
    assert owner.back == []


@pytest.mark.anyio
async def test_a_waiter_cancelled_before_the_hand_off_is_skipped_even_before_it_ran() -> None:
    owner = Owner()
    first, second = await waiters(owner.line, 2)
    first.cancel()  # still in the deque: hand() must pass over it
    assert owner.line.hand("v")
    with pytest.raises(asyncio.CancelledError):
        await first
    assert await within(second) == "v"
    assert owner.back == []


@pytest.mark.anyio
async def test_a_value_handed_to_a_waiter_cancelled_before_it_ran_goes_to_the_next() -> None:
    owner = Owner()
    first, second = await waiters(owner.line, 2)
    assert owner.line.hand("slot")  # handed to `first`...
    first.cancel()  # ...which is cancelled before it could take it
    with pytest.raises(asyncio.CancelledError):
        await first
    assert await within(second) == "slot"  # passed on, not lost
    assert owner.back == ["slot"] and owner.free == []


@pytest.mark.anyio
async def test_a_value_handed_to_the_last_waiter_cancelled_comes_back_to_the_owner() -> None:
    owner = Owner()
    (only,) = await waiters(owner.line, 1)
    assert owner.line.hand("slot")
    only.cancel()
    with pytest.raises(asyncio.CancelledError):
        await only
    assert owner.free == ["slot"]  # not leaked: free again
    assert not owner.line


@pytest.mark.anyio
async def test_a_value_passed_along_a_chain_of_cancelled_waiters_reaches_the_first_that_stays() -> (
    None
):
    owner = Owner()
    tasks = await waiters(owner.line, 4)
    assert owner.line.hand("slot")
    for task in tasks[:3]:
        task.cancel()  # the first was handed the value; the next two leave before their turn
    assert await within(tasks[3]) == "slot"
    for task in tasks[:3]:
        with pytest.raises(asyncio.CancelledError):
            await task
    assert owner.back == ["slot"] and owner.free == []


@pytest.mark.anyio
async def test_a_timeout_is_a_cancellation_like_any_other() -> None:
    owner = Owner()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0):
            await owner.line.wait()
    assert not owner.line and owner.line.waiting == 0


@pytest.mark.anyio
async def test_fail_all_fails_every_waiter_and_empties_the_line() -> None:
    owner = Owner()
    tasks = await waiters(owner.line, 3)
    made: list[RuntimeError] = []

    def error() -> RuntimeError:
        made.append(RuntimeError(f"closed {len(made)}"))
        return made[-1]

    owner.line.fail_all(error)
    assert not owner.line
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert results == made and len(made) == 3  # one error each
    assert owner.back == []


@pytest.mark.anyio
async def test_a_failed_waiter_that_is_also_cancelled_raises_cancelled_and_gives_nothing_back() -> (
    None
):
    owner = Owner()
    (task,) = await waiters(owner.line, 1)
    owner.line.fail_all(lambda: RuntimeError("closed"))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert owner.back == []


@pytest.mark.anyio
async def test_the_line_is_full_at_its_limit_of_live_waiters() -> None:
    owner = Owner(limit=2)
    assert not owner.line.full()
    first, second = await waiters(owner.line, 2)
    assert owner.line.full()
    first.cancel()  # a waiter that left no longer counts, even before it ran
    assert not owner.line.full()
    with pytest.raises(asyncio.CancelledError):
        await first
    owner.line.hand(None)
    await within(second)


@pytest.mark.anyio
async def test_an_unbounded_line_is_never_full_and_a_zero_limit_always_is() -> None:
    unbounded = Owner()
    tasks = await waiters(unbounded.line, 50)
    assert not unbounded.line.full()
    unbounded.line.fail_all(lambda: RuntimeError("done"))
    await asyncio.gather(*tasks, return_exceptions=True)
    assert Owner(limit=0).line.full()


@pytest.mark.anyio
async def test_statistics_count_the_waiters_still_waiting() -> None:
    owner = Owner(limit=5)
    assert owner.line.statistics() == LineStatistics(waiting=0, limit=5)
    tasks = await waiters(owner.line, 3)
    tasks[1].cancel()
    assert owner.line.statistics() == LineStatistics(waiting=2, limit=5)
    owner.line.hand("x")
    assert owner.line.statistics().waiting == 1
    assert Owner().line.statistics().limit is None
    owner.line.fail_all(lambda: RuntimeError("done"))
    await asyncio.gather(*tasks, return_exceptions=True)
