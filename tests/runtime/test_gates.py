"""The gate built on the one waiting line (podium.runtime._gate.WorkerGate): slots across
workers with a bounded shared line, a worker's own line for requests pinned to it
(``acquire_on``), and the hand-off races of both lines."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from podium.errors import QueueFull, Unavailable
from podium.runtime._gate import WorkerGate


class W:
    def __init__(self, name: str, capacity: int = 1) -> None:
        self.name = name
        self.busy = 0
        self.capacity = capacity


async def within(awaitable: Any) -> Any:
    async with asyncio.timeout(2):
        return await awaitable


async def started(coro: Any) -> asyncio.Task[Any]:
    task = asyncio.ensure_future(coro)
    await asyncio.sleep(0)
    return task


@pytest.mark.anyio
async def test_a_pinned_request_takes_a_free_slot_on_its_worker_at_once() -> None:
    gate = WorkerGate("m", max_waiting=10)
    a, b = W("a"), W("b")
    gate.add(a)
    gate.add(b)
    assert await gate.acquire_on(b) is b
    assert (a.busy, b.busy) == (0, 1)


@pytest.mark.anyio
async def test_pinned_requests_wait_in_their_workers_own_line_behind_the_shared_one() -> None:
    gate = WorkerGate("m", max_waiting=10)
    a = W("a")
    gate.add(a)
    await gate.acquire()
    shared = await started(gate.acquire())
    pinned = [await started(gate.acquire_on(a)) for _ in range(2)]
    assert gate.waiting == 1 and gate.waiting_on(a) == 2
    assert not gate.try_acquire_on(a)  # no slot, and others wait for one
    gate.release(a)
    assert await within(shared) is a  # the shared line is served first
    assert not any(t.done() for t in pinned)
    gate.release(a)
    assert await within(pinned[0]) is a and not pinned[1].done()
    gate.release(a)
    assert await within(pinned[1]) is a
    assert a.busy == 1 and gate.waiting_on(a) == 0


@pytest.mark.anyio
async def test_a_newcomer_does_not_pass_the_requests_pinned_to_a_worker() -> None:
    gate = WorkerGate("m", max_waiting=10)
    a = W("a", capacity=2)
    gate.add(a)
    await gate.acquire_on(a)
    await gate.acquire_on(a)
    waiter = await started(gate.acquire_on(a))
    a.busy -= 1  # a slot frees without a release (as if counted elsewhere): the line is first
    assert not gate.try_acquire_on(a)
    gate.release(a)
    assert await within(waiter) is a


@pytest.mark.anyio
async def test_a_pinned_waiter_cancelled_as_it_is_handed_a_slot_passes_it_on() -> None:
    gate = WorkerGate("m", max_waiting=10)
    a = W("a")
    gate.add(a)
    await gate.acquire_on(a)
    first = await started(gate.acquire_on(a))
    second = await started(gate.acquire_on(a))
    gate.release(a)  # handed to `first`...
    first.cancel()  # ...which is cancelled before it runs
    assert await within(second) is a
    assert a.busy == 1
    with pytest.raises(asyncio.CancelledError):
        await first


@pytest.mark.anyio
async def test_removing_a_worker_fails_the_requests_pinned_to_it_and_refuses_new_ones() -> None:
    gate = WorkerGate("m", max_waiting=10)
    a, b = W("a"), W("b")
    gate.add(a)
    gate.add(b)
    await gate.acquire_on(a)
    waiting = await started(gate.acquire_on(a))
    gate.remove(a)
    with pytest.raises(Unavailable, match="pinned to left"):
        await within(waiting)
    with pytest.raises(Unavailable, match="pinned to left"):
        await gate.acquire_on(a)
    assert await gate.acquire_on(b) is b  # the other worker is untouched


@pytest.mark.anyio
async def test_fail_pinned_gives_each_waiter_the_owners_error() -> None:
    gate = WorkerGate("m", max_waiting=10)
    a = W("a")
    gate.add(a)
    await gate.acquire_on(a)
    waiting = [await started(gate.acquire_on(a)) for _ in range(2)]
    gate.fail_pinned(a, lambda: Unavailable("stopped"))
    outcome = await within(asyncio.gather(*waiting, return_exceptions=True))
    assert [str(e) for e in outcome] == ["stopped", "stopped"] and outcome[0] is not outcome[1]
    gate.release(a)
    assert a.busy == 0


@pytest.mark.anyio
async def test_a_waiter_cancelled_as_it_is_handed_a_slot_passes_it_on() -> None:
    gate = WorkerGate("g", max_waiting=5)
    a = W("a")
    gate.add(a)
    await gate.acquire()
    first = await started(gate.acquire())
    second = await started(gate.acquire())
    gate.release(a)  # handed to `first`...
    first.cancel()  # ...which is cancelled before it runs
    assert await within(second) is a
    with pytest.raises(asyncio.CancelledError):
        await first
    assert (a.busy, gate.waiting) == (1, 0)
    gate.release(a)
    assert a.busy == 0  # nothing leaked either


@pytest.mark.anyio
async def test_slots_are_counted_and_a_full_line_is_refused() -> None:
    gate = WorkerGate("g", max_waiting=1)
    a = W("a", capacity=2)
    gate.add(a)
    await gate.acquire()
    await gate.acquire()
    assert (a.busy, gate.waiting) == (2, 0)
    waiter = await started(gate.acquire())
    assert gate.waiting == 1
    with pytest.raises(QueueFull, match="model 'g' queue is full: 1 requests waiting"):
        await gate.acquire()
    gate.release(a)
    assert await within(waiter) is a
    assert (a.busy, gate.waiting) == (2, 0)
    gate.release(a)
    gate.release(a)
    assert a.busy == 0


@pytest.mark.anyio
async def test_a_cancelled_waiter_takes_no_slot() -> None:
    gate = WorkerGate("g", max_waiting=2)
    a = W("a")
    gate.add(a)
    await gate.acquire()
    waiters = [await started(gate.acquire()) for _ in range(2)]
    assert gate.waiting == 2
    waiters[0].cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiters[0]
    assert gate.waiting == 1
    gate.release(a)
    await within(waiters[1])
    assert (a.busy, gate.waiting) == (1, 0)
    gate.release(a)
    await gate.acquire()  # the slot was not lost to the cancelled waiter
    assert a.busy == 1


@pytest.mark.anyio
@pytest.mark.parametrize("seed", range(5))
async def test_random_cancellations_never_lose_or_leak_a_slot(seed: int) -> None:
    """Many requests through both kinds of waiting (shared and pinned), a random third of them
    cancelled at random moments, handed or not: in the end every slot is free, none was held
    twice, and every request that was not cancelled got through."""
    rng = random.Random(seed)
    gate = WorkerGate("m", max_waiting=1000)
    workers = [W("a", capacity=2), W("b", capacity=1)]
    for w in workers:
        gate.add(w)
    done: list[int] = []

    async def request(n: int) -> None:
        pinned = rng.random() < 0.5
        worker = await (gate.acquire_on(workers[n % 2]) if pinned else gate.acquire())
        try:
            assert worker.busy <= worker.capacity
            await asyncio.sleep(0)
            done.append(n)
        finally:
            gate.release(worker)

    tasks = [asyncio.ensure_future(request(n)) for n in range(200)]
    cancelled: set[int] = set()
    while not all(t.done() for t in tasks):
        for n, task in enumerate(tasks):
            if not task.done() and rng.random() < 0.02:
                task.cancel()
                cancelled.add(n)
        await asyncio.sleep(0)
    await within(asyncio.gather(*tasks, return_exceptions=True))
    assert [w.busy for w in workers] == [0, 0]
    assert gate.waiting == 0 and all(gate.waiting_on(w) == 0 for w in workers)
    assert set(range(200)) - cancelled <= set(done)


@pytest.mark.anyio
async def test_a_waiter_that_left_does_not_count_against_the_bound() -> None:
    gate = WorkerGate("m", max_waiting=4)
    gate.add(W("a"))
    await gate.acquire()
    waiters = [await started(gate.acquire()) for _ in range(4)]
    newcomer = asyncio.ensure_future(gate.acquire())  # runs before...
    waiters[0].cancel()  # ...this one leaves the line: four by length, three waiting
    await asyncio.sleep(0)
    waiters.append(newcomer)
    assert not waiters[-1].done()  # three waited: it was let in
    with pytest.raises(QueueFull):  # four wait: the next is refused
        await gate.acquire()
    for waiter in waiters:
        waiter.cancel()
    await asyncio.gather(*waiters, return_exceptions=True)
