"""One fair waiting line: the queue under every gate and turn in the runtime.

A :class:`Line` is a first-come-first-served line of waiters, each of which is *handed* one
value by whoever frees it: a worker's slot (``WorkerGate``), a sequence's turn. The owner keeps
the count of what is free and decides when to hand; the line owns the races that come with
waiting in asyncio (after Trio's ``ParkingLot``, the one queue under all of Trio's
synchronisation primitives):

- a waiter cancelled before it is handed anything leaves the line and takes nothing;
- a waiter cancelled *after* it was handed a value, but before it could run, gives the value
  back through the owner's ``release`` (which hands it to the next waiter, or frees it): a value
  is never lost and never leaked;
- a value is handed to the oldest waiter still waiting; waiters that left are skipped.

Waiting costs one future; a line nobody waits in costs nothing on the way through (its truth
value, the check that keeps a newcomer from passing the waiters, is the deque's own).
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["Line", "LineStatistics"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class LineStatistics:
    """What a line holds now: ``waiting`` waiters, at most ``limit`` (None: unbounded)."""

    waiting: int
    limit: int | None


# A deque subclass rather than a wrapper: ``not line`` is then the deque's own C-level check,
# paid by every request that passes a gate (a ``__bool__`` written in Python is a call each time).
class Line(collections.deque["asyncio.Future[T]"], Generic[T]):
    """Waiters in arrival order, each handed one value (``T``) by :meth:`hand`.

    ``release`` is the owner's way to give a value back: the line calls it with a value that
    was handed to a waiter cancelled before it could take it. ``limit`` bounds the line for
    :meth:`full` (None: unbounded). The line is true while anyone is in it (a waiter that has
    just been cancelled may still count until it has run); use only the methods below on it.
    """

    __slots__ = ("release", "limit")

    def __init__(self, release: Callable[[T], object], limit: int | None = None) -> None:
        super().__init__()
        self.release = release
        self.limit = limit

    @property
    def waiting(self) -> int:
        """Waiters still waiting (not handed a value, not failed, not cancelled)."""
        return sum(1 for future in self if not future.done())

    def full(self) -> bool:
        """Whether ``limit`` waiters wait already: the owner refuses a newcomer at once."""
        limit = self.limit
        return limit is not None and len(self) >= limit and self.waiting >= limit

    def statistics(self) -> LineStatistics:
        return LineStatistics(self.waiting, self.limit)

    async def wait(self) -> T:
        """Wait at the back of the line until handed a value; raise what :meth:`fail_all` set.

        Cancelled while waiting: leaves the line. Cancelled once handed a value: gives it
        back through ``release`` (the next waiter gets it) and raises ``CancelledError``.
        """
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self.append(future)
        try:
            return await future
        except asyncio.CancelledError:
            if not future.done() or future.cancelled():
                try:
                    self.remove(future)
                except ValueError:  # already dropped by hand() or fail_all()
                    pass
            elif future.exception() is None:
                self.release(future.result())  # handed a value as it was cancelled: pass it on
            raise

    def hand(self, value: T) -> bool:
        """Give ``value`` to the oldest waiter; False (and ``value`` not given) if none waits."""
        while self:
            future = self.popleft()
            if not future.done():
                future.set_result(value)
                return True
        return False

    def fail_all(self, error: Callable[[], BaseException]) -> None:
        """Every waiter leaves the line with ``error()`` (nothing will be handed to them)."""
        while self:
            future = self.popleft()
            if not future.done():
                future.set_exception(error())
