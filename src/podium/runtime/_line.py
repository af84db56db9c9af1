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

A line with a :class:`QueuePolicy` (a model's ``max_queue_delay``, ``priority_levels``...) also
bounds each wait in time and orders waiters by priority:

- a waiter's deadline is the earliest of its arrival plus ``max_wait`` and the request's own
  (:attr:`podium.types.RequestInfo.deadline`); past it the waiter leaves the line with
  ``QueueTimeout`` (503, ``Retry-After``) at once, by a timer, without being handed anything; a
  request whose deadline has passed already is refused without waiting, and so is one that
  would wait past it: the line keeps its pace (the moving average of the time between two
  values handed while waiters remained), and a newcomer with ``n`` waiters ahead of it expects
  to wait ``(n + 1) × pace``;
- with several levels, :meth:`Line.hand` gives the value to the waiter of the highest level
  (1 is the highest), the oldest first within a level; a waiter rises one level for each
  ``aging`` seconds it has waited (up to the top), so a waiter of any level is served after at
  most ``(levels - 1) × aging`` seconds plus the wait of the top level: none starves.
"""

from __future__ import annotations

import asyncio
import collections
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from ..config import ModelConfig
from ..errors import InvalidInput, QueueTimeout
from ..types import current_request
from ._clock import SYSTEM_CLOCK, Clock, Timer

__all__ = ["Line", "LineStatistics", "QueuePolicy", "queue_deadline", "retry_after"]

T = TypeVar("T")


def retry_after(max_wait: float) -> float:
    """Seconds a refused client is told to wait: the longest wait, at least one second."""
    return max(1.0, math.ceil(max_wait))


def queue_deadline(now: float, max_wait: float, model: str) -> float | None:
    """When a request that arrives ``now`` must have left a queue: ``max_wait`` after (0: no
    limit), or sooner where the request asked (:attr:`podium.types.RequestInfo.deadline`, on
    the system clock's scale, ``time.monotonic``); None: never. ``QueueTimeout`` if that has
    passed already: the request is refused without waiting."""
    info = current_request.get()
    end = None if info is None else info.deadline
    if max_wait and (end is None or now + max_wait < end):
        end = now + max_wait
    if end is not None and end <= now:
        raise QueueTimeout.of(model, 0.0, retry_after(max_wait))
    return end


@dataclass(frozen=True, slots=True)
class LineStatistics:
    """What a line holds now: ``waiting`` waiters, at most ``limit`` (None: unbounded)."""

    waiting: int
    limit: int | None


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """How long a model's waiters may wait and in which order they are served.

    ``max_wait``: seconds a waiter may wait (0: no limit but the request's own deadline);
    ``levels``: priority levels (1 the highest); ``default``: the level of a request that names
    none (priority 0); ``aging``: seconds of waiting that raise a waiter one level; ``clock``:
    what times it all (tests pass a manual one). ``model`` names the model in refusals.
    """

    model: str
    max_wait: float = 0.0
    levels: int = 1
    default: int = 1
    aging: float = 1.0
    clock: Clock = SYSTEM_CLOCK

    @classmethod
    def of(cls, config: ModelConfig, clock: Clock = SYSTEM_CLOCK) -> QueuePolicy:
        """The policy a model's config asks for (``max_queue_delay``, ``priority_levels``,
        ``default_priority``, ``priority_aging``)."""
        return cls(
            config.name,
            config.max_queue_delay_ms / 1000.0,
            config.priority_levels,
            config.default_priority,
            config.priority_aging_ms / 1000.0,
            clock,
        )

    def level(self, priority: int) -> int:
        """The level of a request that asked for ``priority`` (0: the default);
        ``InvalidInput`` if it is not one of the levels."""
        if not priority:
            return self.default
        if not 1 <= priority <= self.levels:
            raise InvalidInput(
                f"model '{self.model}' has priority levels 1-{self.levels} (1 the highest), "
                f"got priority {priority}"
            )
        return priority

    def retry_after(self) -> float:
        """Seconds a refused client is told to wait (:func:`retry_after`)."""
        return retry_after(self.max_wait)


# A deque subclass rather than a wrapper: ``not line`` is then the deque's own C-level check,
# paid by every request that passes a gate (a ``__bool__`` written in Python is a call each time).
class Line(collections.deque["asyncio.Future[T]"], Generic[T]):
    """Waiters in arrival order, each handed one value (``T``) by :meth:`hand`.

    ``release`` is the owner's way to give a value back: the line calls it with a value that
    was handed to a waiter cancelled before it could take it. ``limit`` bounds the line for
    :meth:`full` (None: unbounded). The line is true while anyone is in it (a waiter that has
    just been cancelled may still count until it has run); use only the methods below on it.
    """

    __slots__ = ("release", "limit", "policy", "_lanes", "_pace", "_last", "_backlogged")

    def __init__(
        self,
        release: Callable[[T], object],
        limit: int | None = None,
        policy: QueuePolicy | None = None,
    ) -> None:
        super().__init__()
        self.release = release
        self.limit = limit
        self.policy = policy
        # with several levels: each level's waiters and their arrival times, oldest first
        # (the deque itself still holds every waiter, in arrival order, for its truth value)
        self._lanes: list[collections.deque[tuple[asyncio.Future[T], float]]] | None = None
        if policy is not None and policy.levels > 1:
            self._lanes = [collections.deque() for _ in range(policy.levels)]
        # with a policy: the time between two values handed while waiters remained (a moving
        # average: how fast the line moves when it is full), to refuse at once a newcomer that
        # could not be served before its deadline
        self._pace = 0.0
        self._last = 0.0
        self._backlogged = False

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
        timer = None if self.policy is None else self._admit(future)
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
        finally:
            if timer is not None:
                timer.cancel()

    def _admit(self, future: asyncio.Future[T]) -> Timer | None:
        """Place ``future`` in its level's lane and set the timer of its deadline (see the
        module's docstring); ``QueueTimeout`` if its deadline has passed already."""
        policy = self.policy
        assert policy is not None
        info = current_request.get()
        now = policy.clock.now()
        lanes = self._lanes
        level = policy.level(info.priority if info is not None else 0)
        end = queue_deadline(now, policy.max_wait, policy.model)
        timer = None
        if end is not None:
            pace = self._pace
            if pace and self:
                ahead = len(self) if lanes is None else sum(len(lane) for lane in lanes[:level])
                expected = (ahead + 1) * pace
                if now + expected > end:  # it would wait past it: refused now, cheaply
                    raise QueueTimeout.expected(policy.model, expected, policy.retry_after())
            timer = policy.clock.call_later(end - now, lambda: self._expire(future, now))
        if lanes is not None:
            lanes[level - 1].append((future, now))
        return timer

    def _expire(self, future: asyncio.Future[T], arrived: float) -> None:
        """``future``'s deadline has come: it leaves the line, refused, if it still waits."""
        if future.done():
            return
        policy = self.policy
        assert policy is not None
        future.set_exception(
            QueueTimeout.of(policy.model, policy.clock.now() - arrived, policy.retry_after())
        )
        try:
            self.remove(future)
        except ValueError:
            pass

    def hand(self, value: T) -> bool:
        """Give ``value`` to the oldest waiter (with levels: of the highest level, counting its
        aging); False (and ``value`` not given) if none waits."""
        if self.policy is not None:
            return self._hand_timed(value)
        while self:
            future = self.popleft()
            if not future.done():
                future.set_result(value)
                return True
        return False

    def _hand_timed(self, value: T) -> bool:
        """:meth:`hand` under a policy: by level, and timed (the line's pace)."""
        policy = self.policy
        assert policy is not None
        now = policy.clock.now()
        if self._lanes is not None:
            handed = self._hand_by_level(value, now)
        else:
            handed = False
            while self:
                future = self.popleft()
                if not future.done():
                    future.set_result(value)
                    handed = True
                    break
        if not handed:
            self._backlogged = False
            return False
        if self._backlogged:
            gap = now - self._last
            self._pace = gap if not self._pace else 0.75 * self._pace + 0.25 * gap
        self._last = now
        self._backlogged = bool(self)
        return True

    def _hand_by_level(self, value: T, now: float) -> bool:
        lanes = self._lanes
        policy = self.policy
        assert lanes is not None and policy is not None
        aging = policy.aging
        best: collections.deque[tuple[asyncio.Future[T], float]] | None = None
        best_rank = best_arrived = 0.0
        for index, lane in enumerate(lanes):
            while lane and lane[0][0].done():
                lane.popleft()
            if not lane:
                continue
            arrived = lane[0][1]
            rank = max(0.0, index - (now - arrived) // aging)
            if best is None or rank < best_rank or (rank == best_rank and arrived < best_arrived):
                best, best_rank, best_arrived = lane, rank, arrived
        if best is None:
            self.clear()  # only waiters that left or were refused were still in it
            return False
        future = best.popleft()[0]
        future.set_result(value)
        while self and self[0].done():  # the oldest waiter still waiting comes first
            self.popleft()
        return True

    def fail_all(self, error: Callable[[], BaseException]) -> None:
        """Every waiter leaves the line with ``error()`` (nothing will be handed to them)."""
        while self:
            future = self.popleft()
            if not future.done():
                future.set_exception(error())
        if self._lanes is not None:
            for lane in self._lanes:
                lane.clear()
