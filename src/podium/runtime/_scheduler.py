"""What every scheduler offers the registry and the data plane, and the predict-slot gate."""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, Protocol

from ..errors import QueueFull
from ..types import SequenceRef

__all__ = ["Activity", "Scheduler", "SequenceScheduling", "SlotGate"]


class Scheduler(Protocol):
    """Runs requests through one model version: preprocess → predict → postprocess."""

    async def infer(self, inputs: Any, request: Any) -> Any:
        """The postprocessed result of one request."""
        ...

    def stream(self, inputs: Any, request: Any) -> AsyncGenerator[Any, None]:
        """The items of one request, as a streaming ``predict`` produces them."""
        ...

    def stream_inputs(self, inputs: AsyncIterator[Any], request: Any) -> AsyncGenerator[Any, None]:
        """The answers of a model that reads a stream of requests (``consumes_stream``)."""
        ...

    def statistics(self) -> dict[str, int]:
        """Counters for metrics and the management API (queue depth, busy slots...)."""
        ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...


class Activity:
    """The requests inside a scheduler, counted so that :meth:`drain` can wait for none (the
    registry drains a version before it stops its workers)."""

    __slots__ = ("count", "_idle")

    def __init__(self) -> None:
        self.count = 0
        self._idle: asyncio.Event | None = None

    def enter(self) -> None:
        self.count += 1

    def leave(self) -> None:
        self.count -= 1
        if not self.count and self._idle is not None:
            self._idle.set()

    async def drain(self) -> None:
        """Return once no request is inside (new ones may still arrive)."""
        while self.count:
            self._idle = asyncio.Event()
            await self._idle.wait()

    async def through(self, items: AsyncGenerator[Any, None]) -> AsyncGenerator[Any, None]:
        """``items``, counted as one request inside for as long as they are read, and closed."""
        self.enter()
        try:
            async with contextlib.aclosing(items):
                async for item in items:
                    yield item
        finally:
            self.leave()


class SequenceScheduling(Scheduler, Protocol):
    """A scheduler of stateful sequences (``sequence_batching``): each call names its place in
    a sequence, and the scheduler fills in the id it used and whether the sequence ended."""

    async def infer_in(self, sequence: SequenceRef, inputs: Any, request: Any) -> Any: ...

    def stream_in(
        self, sequence: SequenceRef, inputs: Any, request: Any
    ) -> AsyncGenerator[Any, None]: ...


class SlotGate:
    """``predict_concurrency`` slots with a bounded, first-come-first-served waiting line.

    A request that finds every slot busy and ``max_waiting`` requests already waiting is refused
    at once with ``QueueFull`` (503), instead of piling up. A released slot is handed straight to
    the oldest waiter. Cancelling a waiter removes it from the line without ever taking a slot
    (and a slot handed to a waiter cancelled at that moment is passed on, never lost).
    """

    def __init__(self, model: str, slots: int, max_waiting: int) -> None:
        self._model = model
        self._slots = slots
        self._max_waiting = max_waiting
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self.busy = 0

    @property
    def waiting(self) -> int:
        return sum(1 for f in self._waiters if not f.done())

    def try_acquire(self) -> bool:
        """Take a free slot without waiting, if there is one and nobody is ahead in line."""
        if self.busy < self._slots and not self._waiters:
            self.busy += 1
            return True
        return False

    async def acquire(self) -> None:
        if self.try_acquire():
            return
        if len(self._waiters) >= self._max_waiting and self.waiting >= self._max_waiting:
            raise QueueFull.of(self._model, self.waiting, self._max_waiting)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release()  # the slot was handed to us as we were cancelled: pass it on
            else:
                try:
                    self._waiters.remove(future)
                except ValueError:
                    pass
            raise

    def release(self) -> None:
        while self._waiters:
            future = self._waiters.popleft()
            if not future.done():
                future.set_result(None)  # the slot goes to this waiter; busy is unchanged
                return
        self.busy -= 1

    def statistics(self) -> dict[str, int]:
        return {"slots": self._slots, "busy": self.busy, "waiting": self.waiting}
