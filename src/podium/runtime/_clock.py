"""The clock schedulers read: the time now, and timers.

Schedulers that wait for time (a batch's ``max_batch_delay``, a sequence's idle and absolute
timeouts) take a :class:`Clock` and read nothing else, so that tests can pass a clock of their
own and move time exactly, without sleeping (``ManualClock`` in ``tests/helpers.py``). The default,
:data:`SYSTEM_CLOCK`, costs no more than reading the loop's time did: ``now`` *is*
``time.monotonic`` (the default event loop's own clock), and only relative delays go to the
running loop's timers (uvloop keeps a clock of its own; nothing compares the two).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["SYSTEM_CLOCK", "Clock", "SystemClock", "Timer"]


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
