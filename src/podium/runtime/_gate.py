"""One first-come-first-served waiting line in front of several workers.

Each worker offers ``capacity`` slots. A request takes a slot on the least-loaded ready worker
(the fewest requests held, ties to the oldest worker); when every slot is taken it waits in one
bounded line shared by all workers, and a freed slot goes straight to the oldest waiter, on
whichever worker freed it. A request pinned to one worker (a stateful sequence's) waits for a
slot on that worker alone, in the worker's own line, served after the shared one. A worker that
is removed (stopping, dead) takes no new work; the requests it already holds finish on it (or
fail with it), the requests pinned to it fail, while the shared line stays intact for the other
workers and for the ones that replace it.

Workers of one version that share a GPU group share one bound too, where the model's
``predict_concurrency`` is per device (:class:`~podium.runtime._device_share.DeviceShares`,
``shares``): a worker takes a request only if both it and its group have room.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from .. import tracing
from ..errors import QueueFull, Unavailable
from ._device_share import DeviceShares
from ._line import Line, QueuePolicy

__all__ = ["WorkerGate"]


class WorkerGate:
    """Slots across workers, with a bounded waiting line (``QueueFull`` past ``max_waiting``)."""

    def __init__(self, model: str, max_waiting: int) -> None:
        self._model = model
        self._max_waiting = max_waiting
        self._workers: list[Any] = []
        self._line: Line[Any] = Line(self.release, max_waiting)
        # worker -> the requests pinned to it that wait for one of its slots
        self._pinned: dict[Any, Line[Any]] = {}
        #: workers being started: while there are some, requests wait for them instead of failing
        self.starting = 0
        self.failure: Exception | None = None  # set when no worker will come (the version failed)
        #: the bound per GPU group, where predict_concurrency is per device (set before any add)
        self.shares: DeviceShares | None = None
        self._idle: dict[Any, asyncio.Event] = {}  # workers whose last request is waited for

    def _room(self, worker: Any) -> bool:
        shares = self.shares
        return worker.busy < worker.capacity and (
            shares is None or shares.room(worker, self._workers)
        )

    def queue_policy(self, policy: QueuePolicy) -> None:
        """Bound each wait in the shared line in time and order it by priority (see
        :class:`~podium.runtime._line.QueuePolicy`); set before any request waits."""
        if self._line:
            raise RuntimeError("a gate's queue policy is set before anyone waits")
        self._line = Line(self.release, self._max_waiting, policy)

    @property
    def waiting(self) -> int:
        """Requests in the shared line."""
        return self._line.waiting

    def waiting_on(self, worker: Any) -> int:
        """Requests pinned to ``worker`` that wait for one of its slots."""
        pinned = self._pinned.get(worker)
        return pinned.waiting if pinned is not None else 0

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
        """The worker takes no new work from now on; requests pinned to it and waiting for one
        of its slots fail with ``Unavailable`` (the scheduler that pinned them says why)."""
        if worker in self._workers:
            self._workers.remove(worker)
        self.fail_pinned(worker, self._worker_left_error)

    def fail_pinned(self, worker: Any, error: Callable[[], BaseException]) -> None:
        """Every request pinned to ``worker`` and waiting for one of its slots gets ``error()``."""
        pinned = self._pinned.pop(worker, None)
        if pinned:
            pinned.fail_all(error)

    def _worker_left_error(self) -> Unavailable:
        return Unavailable(f"model '{self._model}': the worker this request is pinned to left")

    def _ahead(self) -> int:
        """Requests taken by workers ahead of their predict slots (a worker with ``ahead``
        places beyond its ``slots``): they wait too, and count against ``max_waiting``."""
        total = 0
        for worker in self._workers:
            if getattr(worker, "ahead", 0):
                total += max(0, worker.busy - worker.slots)
        return total

    def try_acquire(self) -> Any:
        """A slot on the least-loaded worker without waiting (the fewest requests held, ties to
        the oldest worker); None if busy or others wait."""
        if self._line:
            return None
        best = None
        shares = self.shares
        for worker in self._workers:
            # :meth:`_room`, inline: every request passes here
            if (
                worker.busy < worker.capacity
                and (best is None or worker.busy < best.busy)
                and (shares is None or shares.room(worker, self._workers))
            ):
                best = worker
        if best is not None:
            best.busy += 1
        return best

    def try_acquire_on(self, worker: Any) -> bool:
        """A slot on ``worker`` itself without waiting, if it still takes work, has one free and
        no pinned request waits for it (a continuous batch holds one while it has requests)."""
        if (
            self._room(worker)
            and not (self._pinned and self._pinned.get(worker))
            and worker in self._workers
        ):
            worker.busy += 1
            return True
        return False

    async def acquire(self) -> Any:
        """A slot on some worker (its ``busy`` already counts this request)."""
        worker = self.try_acquire()
        if worker is not None:
            return worker
        if not self._workers and not self.starting:
            raise self.none_coming()
        line = self._line
        waiting = line.waiting + self._ahead()
        if waiting >= self._max_waiting:
            raise QueueFull.of(self._model, waiting, self._max_waiting)
        hooks = tracing.hooks  # only a request that waits pays for this test
        if hooks is None:
            return await line.wait()
        with hooks.queue():
            return await line.wait()

    async def acquire_on(self, worker: Any) -> Any:
        """A slot on ``worker`` itself, for a request pinned to it: at once if one is free and
        no other pinned request waits for it, else in the worker's own FIFO line. Returns the
        worker. ``Unavailable`` if the worker takes no new work, or leaves while this waits."""
        if self.try_acquire_on(worker):
            return worker
        if worker not in self._workers:
            raise self._worker_left_error()
        pinned = self._pinned.get(worker)
        if pinned is None:
            pinned = self._pinned[worker] = Line(self.release)
        hooks = tracing.hooks
        if hooks is None:
            return await pinned.wait()
        with hooks.queue():
            return await pinned.wait()

    async def idle(self, worker: Any) -> None:
        """Return once ``worker`` holds no request (a worker retired: what it held has ended)."""
        if worker.busy:
            await self._idle.setdefault(worker, asyncio.Event()).wait()

    def release(self, worker: Any) -> None:
        """The request is done with ``worker``'s slot: it goes to the oldest waiter, if any."""
        worker.busy -= 1
        if self._idle and not worker.busy and worker in self._idle:
            self._idle.pop(worker).set()
        if self.shares is not None and worker.devices:
            # its group has room again: the least loaded of the group's workers takes the next
            # request (another before this one on a tie, so that they take turns)
            group = [w for w in self._workers if w.devices == worker.devices and w is not worker]
            if worker in self._workers:
                group.append(worker)
            for member in sorted(group, key=lambda w: w.busy):
                self._wake(member)
        elif (self._line or self._pinned) and worker in self._workers:  # someone waits
            self._wake(worker)

    def _wake(self, worker: Any) -> None:
        # the shared line first, then the requests pinned to this worker
        line = self._line
        while line and self._room(worker) and line.hand(worker):
            worker.busy += 1
        if self._pinned:
            pinned = self._pinned.get(worker)
            while pinned and self._room(worker) and pinned.hand(worker):
                worker.busy += 1

    def none_coming(self) -> Exception:
        """Why no worker will take a request: the version failed, or it runs none."""
        return self.failure or Unavailable(
            f"model '{self._model}' has no workers (min_workers 0); scale it up to serve"
        )

    def fail_waiters(self, exc: Exception) -> None:
        """No worker is coming (the version failed or is closing): every waiter in the shared
        line gets ``exc``."""
        self.failure = exc
        self._line.fail_all(lambda: exc)
