"""Helpers for tests anywhere in the tree (``from helpers import wait_until``)."""

from __future__ import annotations

import asyncio
import heapq
import inspect
import itertools
import selectors
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from podium.runtime import Registry
    from podium.runtime._clock import Timer


async def wait_until(
    condition: Callable[[], object | Awaitable[object]],
    within: float = 5.0,
    *,
    every: float = 0.001,
    what: str = "",
) -> None:
    """Poll ``condition`` until it is true (an async one is awaited): for plain state that has
    no event to await (a scheduler's statistics, what a model recorded, a file another process
    writes, a server's answers). Fails with ``AssertionError`` after ``within`` seconds: a safety
    net against a hang, not a timing."""
    try:
        async with asyncio.timeout(within):
            while True:
                holds = condition()
                if inspect.isawaitable(holds):
                    holds = await holds
                if holds:
                    return
                await asyncio.sleep(every)
    except TimeoutError:
        raise AssertionError(f"not true within {within} s: {what or condition}") from None


class _ManualTimer:
    __slots__ = ("callback", "cancelled")

    def __init__(self, callback: Callable[[], object]) -> None:
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """A clock (``podium.runtime._clock.Clock``) that moves only when told to: :meth:`advance`
    runs the timers that fall due, in order, each with ``now()`` at its own due time, then stops
    at the target."""

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


class JumpingClockLoop(asyncio.SelectorEventLoop):
    """An asyncio event loop on a clock of its own, as trio's autojump clock: time stands still
    while a callback is ready or a socket has something to read, and jumps to the next timer as
    soon as nothing else can run. Code that waits on timers and on other tasks (sleeps,
    timeouts, ``asyncio.wait``) then meets its timers in the order it set them and at exact
    times, however slow or loaded the machine, and a test of a 30 s timeout takes no 30 s.
    Not for code that waits on another thread or process: the clock does not wait for it."""

    def __init__(self) -> None:
        self._jumped = 0.0
        super().__init__(_JumpingSelector(self))

    def time(self) -> float:
        return self._jumped


class _JumpingSelector(selectors.DefaultSelector):
    """What the loop waits on: anything ready now, else the clock moves on by the time the loop
    would have slept (to its next timer)."""

    def __init__(self, loop: JumpingClockLoop) -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:  # no timer at all: only I/O can move things on
            return super().select(None)
        self._loop._jumped += timeout
        return []


def all_ready(registry: Registry) -> bool:
    """Whether every version of ``registry`` that should serve does (an unloaded one is not
    counted)."""
    from podium.types import ModelState

    return all(
        mv.state is ModelState.READY for mv in registry if mv.state is not ModelState.UNLOADED
    )
