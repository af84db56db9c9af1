"""The clock schedulers read: the time now, and timers; and the tasks the runtime starts, each
owned by whoever started it (:class:`TaskSet`: schedulers, the worker pool, the repository).

Schedulers that wait for time (a batch's ``max_batch_delay``, a sequence's idle and absolute
timeouts) take a :class:`Clock` and read nothing else, so that tests can pass a clock of their
own and move time exactly, without sleeping (``ManualClock`` in ``tests/helpers.py``). The default,
:data:`SYSTEM_CLOCK`, costs no more than reading the loop's time did: ``now`` *is*
``time.monotonic`` (the default event loop's own clock), and only relative delays go to the
running loop's timers (uvloop keeps a clock of its own; nothing compares the two).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, TypeVar

__all__ = ["SYSTEM_CLOCK", "Clock", "SystemClock", "TaskSet", "Timer"]

T = TypeVar("T")


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


class TaskSet:
    """The tasks a scheduler starts (batch collectors, running batches), owned by it:
    :meth:`cancel` cancels every one still running and waits for them, so that none outlives
    the scheduler's ``close()``.

    A set made with ``log`` holds background work done for whoever asked (the model
    repository's loads and scaling): its tasks run in the asker's context (their log lines carry
    its request id), are named by what they do, and a failure, which nobody awaits, is logged
    to ``log``."""

    __slots__ = ("_tasks", "_log")

    def __init__(self, log: logging.Logger | None = None) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self._log = log

    def spawn(self, coro: Coroutine[Any, Any, T], what: str | None = None) -> asyncio.Task[T]:
        """Run ``coro`` in a task of this set (it leaves the set when it ends). Without
        ``log``, in a context of its own: it serves no one request (a collector, a batch), so
        it does not carry the request id (nor the span) of the request that happened to start
        it. With ``log``: see the class."""
        loop = asyncio.get_running_loop()
        if self._log is None:
            task = loop.create_task(coro, context=contextvars.Context())
        else:
            task = loop.create_task(self._logged(coro, what or "a background task"), name=what)
            # Cancelled before its first step, the wrapper never awaits ``coro``: close it
            # (a no-op once it has run), or it is reported as never awaited.
            task.add_done_callback(lambda _: coro.close())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _logged(self, coro: Coroutine[Any, Any, Any], what: str) -> Any:
        try:
            return await coro
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # nobody awaits a background task's result: log it
            assert self._log is not None
            self._log.error("%s failed: %s", what, exc, exc_info=exc)

    async def cancel(self) -> None:
        """Cancel every task still running and return once they have all ended."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
