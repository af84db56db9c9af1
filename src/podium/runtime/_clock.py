"""The clock schedulers read: the time now, and timers.

Schedulers that wait for time (a batch's ``max_batch_delay``, a sequence's idle and absolute
timeouts) take a :class:`Clock` and read nothing else, so that tests can pass a
:class:`ManualClock` and move time exactly, without sleeping. The default,
:data:`SYSTEM_CLOCK`, costs no more than reading the loop's time did: ``now`` *is*
``time.monotonic`` (the default event loop's own clock), and only relative delays go to the
running loop's timers (uvloop keeps a clock of its own; nothing compares the two).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["SYSTEM_CLOCK", "Clock", "ManualClock", "SystemClock", "Timer"]


class Timer(Protocol):
    """A callback set to run later; ``cancel()`` stops it (a no-op once it ran)."""

    def cancel(self) -> None: ...


class Clock(Protocol):
    """Seconds on a monotonic scale (``now``), and callbacks after a delay (``call_later``)."""

    def now(self) -> float: ...

    def call_later(self, delay: float, callback: Callable[[], object]) -> Timer: ...


class SystemClock:
    """``time.monotonic`` and the running loop's timers."""

    __slots__ = ()

    now = staticmethod(time.monotonic)

    def call_later(self, delay: float, callback: Callable[[], object]) -> Timer:
        return asyncio.get_running_loop().call_later(delay, callback)


SYSTEM_CLOCK = SystemClock()


class _ManualTimer:
    __slots__ = ("callback", "cancelled")

    def __init__(self, callback: Callable[[], object]) -> None:
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """A clock that moves only when told to (for tests): :meth:`advance` runs the timers that
    fall due, in order, each with ``now()`` at its own due time, then stops at the target."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._timers: list[tuple[float, int, _ManualTimer]] = []
        self._order = itertools.count()  # equal due times run in the order they were set

    def now(self) -> float:
        return self._now

    def call_later(self, delay: float, callback: Callable[[], object]) -> Timer:
        timer = _ManualTimer(callback)
        heapq.heappush(self._timers, (self._now + max(delay, 0.0), next(self._order), timer))
        return timer

    @property
    def pending(self) -> int:
        """Timers set and neither run nor cancelled."""
        return sum(1 for _, _, timer in self._timers if not timer.cancelled)

    def advance(self, seconds: float) -> None:
        """Move ``seconds`` on, running each timer due by then (synchronously, in this call;
        timers they set that fall due in the same span run too)."""
        if seconds < 0:
            raise ValueError(f"a clock only moves forward, not by {seconds!r} s")
        target = self._now + seconds
        while self._timers and self._timers[0][0] <= target:
            due, _, timer = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            self._now = max(self._now, due)
            timer.cancelled = True  # ran: cancelling it now changes nothing
            timer.callback()
        self._now = target
