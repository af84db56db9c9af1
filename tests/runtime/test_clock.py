"""The clock schedulers read: podium.runtime._clock's system clock, and the manual one tests move
by hand (tests/helpers.py)."""

from __future__ import annotations

import asyncio
import time

import pytest
from helpers import ManualClock

from podium.runtime._clock import SYSTEM_CLOCK


def test_manual_time_moves_only_when_advanced() -> None:
    clock = ManualClock(start=10.0)
    assert clock.now() == 10.0
    clock.advance(0.25)
    assert clock.now() == 10.25
    with pytest.raises(ValueError, match="only moves forward"):
        clock.advance(-1)


def test_due_timers_run_in_order_each_at_its_own_time() -> None:
    clock = ManualClock()
    ran: list[tuple[str, float]] = []
    clock.call_later(0.3, lambda: ran.append(("c", clock.now())))
    clock.call_later(0.1, lambda: ran.append(("a", clock.now())))
    clock.call_later(0.1, lambda: ran.append(("b", clock.now())))  # same time: set order
    clock.advance(0.2)
    assert ran == [("a", 0.1), ("b", 0.1)]
    assert clock.now() == 0.2 and clock.pending == 1
    clock.advance(0.1)
    assert ran[-1] == ("c", pytest.approx(0.3))


def test_a_cancelled_timer_never_runs_and_cancelling_after_it_ran_is_harmless() -> None:
    clock = ManualClock()
    ran: list[str] = []
    gone = clock.call_later(0.1, lambda: ran.append("gone"))
    kept = clock.call_later(0.1, lambda: ran.append("kept"))
    gone.cancel()
    assert clock.pending == 1
    clock.advance(1)
    kept.cancel()
    assert ran == ["kept"] and clock.pending == 0


def test_timers_set_by_timers_run_within_the_same_advance() -> None:
    clock = ManualClock()
    ticks: list[float] = []

    def tick() -> None:
        ticks.append(clock.now())
        clock.call_later(0.25, tick)

    clock.call_later(0.25, tick)
    clock.advance(1.0)
    assert ticks == [0.25, 0.5, 0.75, 1.0]


@pytest.mark.anyio
async def test_the_system_clock_is_monotonic_time_and_the_loops_timers() -> None:
    before = time.monotonic()
    now = SYSTEM_CLOCK.now()
    assert before <= now <= time.monotonic()
    fired = asyncio.Event()
    SYSTEM_CLOCK.call_later(0.001, fired.set)
    await asyncio.wait_for(fired.wait(), 2)
    cancelled = SYSTEM_CLOCK.call_later(0.001, fired.clear)
    cancelled.cancel()
    await asyncio.sleep(0.01)
    assert fired.is_set()
