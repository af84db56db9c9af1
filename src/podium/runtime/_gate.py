"""One first-come-first-served waiting line in front of several workers.

Each worker offers ``capacity`` slots. A request takes a slot on the least-loaded ready worker
(the fewest requests held, ties to the oldest worker); when every slot is taken it waits in one
bounded line shared by all workers, and a freed slot goes straight to the oldest waiter, on
whichever worker freed it. A worker that is removed (stopping, dead) takes no new work; the
requests it already holds finish on it (or fail with it), while the line stays intact for the
other workers and for the ones that replace it.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from typing import Any, Protocol

from ..errors import QueueFull, Unavailable

__all__ = ["Slotted", "WorkerGate"]


class Slotted(Protocol):
    """What the gate needs of a worker."""

    busy: int
    capacity: int


class WorkerGate:
    """Slots across workers, with a bounded waiting line (``QueueFull`` past ``max_waiting``)."""

    def __init__(self, model: str, max_waiting: int) -> None:
        self._model = model
        self._max_waiting = max_waiting
        self._workers: list[Any] = []
        self._waiters: collections.deque[asyncio.Future[Any]] = collections.deque()
        #: workers being started: while there are some, requests wait for them instead of failing
        self.starting = 0
        self.failure: Exception | None = None  # set when no worker will come (the version failed)
        #: told of every slot freed (after the line was served): a scheduler that pins requests
        #: to one worker (stateful sequences) waits for that worker's slots itself
        self.on_release: Callable[[Any], None] | None = None

    @property
    def waiting(self) -> int:
        return sum(1 for f in self._waiters if not f.done())

    @property
    def workers(self) -> list[Any]:
        return list(self._workers)

    def add(self, worker: Any) -> None:
        """A ready worker starts taking work (waiters first)."""
        if worker not in self._workers:
            self._workers.append(worker)
        self.failure = None
        self._wake(worker)

    def remove(self, worker: Any) -> None:
        """The worker takes no new work from now on."""
        if worker in self._workers:
            self._workers.remove(worker)

    def _free(self) -> Any:
        best = None
        for worker in self._workers:
            if worker.busy < worker.capacity and (best is None or worker.busy < best.busy):
                best = worker
        return best

    def try_acquire(self) -> Any:
        """A slot on the least-loaded worker without waiting; None if busy or others wait."""
        if self._waiters:
            return None
        worker = self._free()
        if worker is not None:
            worker.busy += 1
        return worker

    def try_acquire_on(self, worker: Any) -> bool:
        """A slot on ``worker`` itself, if it still takes work and has one free (a request pinned
        to it, as a stateful sequence's are); otherwise the caller waits for ``on_release``."""
        if worker.busy < worker.capacity and worker in self._workers:
            worker.busy += 1
            return True
        return False

    async def acquire(self) -> Any:
        """A slot on some worker (its ``busy`` already counts this request)."""
        worker = self.try_acquire()
        if worker is not None:
            return worker
        if not self._workers and not self.starting:
            if self.failure is not None:
                raise self.failure
            raise Unavailable(
                f"model '{self._model}' has no workers (min_workers 0); scale it up to serve"
            )
        if len(self._waiters) >= self._max_waiting and self.waiting >= self._max_waiting:
            raise QueueFull.of(self._model, self.waiting, self._max_waiting)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        try:
            return await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release(future.result())  # handed a slot as we were cancelled: pass it on
            else:
                try:
                    self._waiters.remove(future)
                except ValueError:
                    pass
            raise

    def release(self, worker: Any) -> None:
        """The request is done with ``worker``'s slot: it goes to the oldest waiter, if any."""
        worker.busy -= 1
        if worker in self._workers:
            self._wake(worker)
            if self.on_release is not None:
                self.on_release(worker)

    def _wake(self, worker: Any) -> None:
        while self._waiters and worker.busy < worker.capacity:
            future = self._waiters.popleft()
            if not future.done():
                worker.busy += 1
                future.set_result(worker)

    def fail_waiters(self, exc: Exception) -> None:
        """No worker is coming (the version failed or is closing): every waiter gets ``exc``."""
        self.failure = exc
        while self._waiters:
            future = self._waiters.popleft()
            if not future.done():
                future.set_exception(exc)
