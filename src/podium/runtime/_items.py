"""One request of a continuous batch, as its reader sees it: the items its generator produced
that the reader has not taken yet (at most ``limit``: the batch's step skips a request whose
buffer is full, which is the back-pressure), and how it ended. Shared by the continuous batching
scheduler and the continuous batches inside sequences, with :class:`StepLoop`, one worker's
batch and the loop that steps it, one step at a time, handing each request what it emitted."""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import AsyncGenerator, Callable
from typing import Any

from ..devices import CPU, using
from ..types import Generation
from ._stats import VersionStats

__all__ = ["ItemBuffer", "StepLoop"]


class ItemBuffer:
    """A request's :class:`Generation`, its unread items, and how it ended (``done``, with
    ``error`` when it failed). ``wake`` is the reader's: items arrived, or the request ended."""

    __slots__ = ("gen", "items", "limit", "wake", "done", "error")

    def __init__(self, gen: Generation, limit: int) -> None:
        self.gen = gen
        self.items: collections.deque[Any] = collections.deque()
        self.limit = limit
        self.wake = asyncio.Event()
        self.done = False
        self.error: BaseException | None = None

    @property
    def gone(self) -> bool:
        """Ended, or its client left: the batch steps it no more."""
        return self.done or self.gen.cancelled

    @property
    def full(self) -> bool:
        """As many unread items as the buffer holds: not stepped until the reader takes one."""
        return len(self.items) >= self.limit

    def end(self, error: BaseException | None = None) -> None:
        """Mark it ended (the first time only) and wake the reader."""
        if not self.done:
            self.done = True
            self.error = error
            self.wake.set()

    async def read(self, stepper: Callable[[], None]) -> AsyncGenerator[Any, None]:
        """The items, in order, as the steps bring them, until the request ends (its error
        raised). ``stepper`` wakes the batch: when taking an item makes room in a full buffer
        (the request may step again), and when the reader leaves early (the request is then
        cancelled: out before the next step)."""
        try:
            while True:
                if self.items:
                    was_full = self.full
                    item = self.items.popleft()
                    if was_full:
                        stepper()
                    yield item
                    continue
                if self.done:
                    if self.error is not None:
                        raise self.error
                    return
                self.wake.clear()
                await self.wake.wait()
        finally:
            if not self.done:
                self.gen.cancelled = True
                stepper()


class StepLoop:
    """One worker's continuous batch and the loop that steps it (:meth:`run`): the continuous
    scheduler's lanes and a worker's batch inside sequences are each one. ``active``: the
    requests in the batch; ``joining``: those that enter it before its next step; ``wake``:
    arrivals, readers catching up, clients leaving.

    Between two steps the loop drops the requests that ended or whose client left and admits
    joining ones, up to ``limit`` (:meth:`_admit`). While it has requests it holds one of the
    worker's slots from ``gate`` (the worker shows busy, a retiring one waits); once it has
    none it ends, unless :meth:`_idle` says to wait. It steps the requests whose buffer has
    room (a full one sits out until its reader catches up). When it stops, each request it
    still holds ends with ``stopped()``.
    """

    __slots__ = (
        "worker",
        "gate",
        "stats",
        "limit",
        "stopped",
        "active",
        "joining",
        "wake",
        "holds_slot",
    )

    def __init__(
        self,
        worker: Any,
        gate: Any,
        stats: VersionStats,
        limit: int,
        stopped: Callable[[], BaseException],
    ) -> None:
        self.worker = worker
        self.gate = gate
        self.stats = stats
        self.limit = max(limit, 1)
        self.stopped = stopped
        self.active: list[Any] = []
        self.joining: collections.deque[Any] = collections.deque()
        self.wake = asyncio.Event()
        self.holds_slot = False

    def _admit(self) -> None:
        """Between steps, once the ended requests left ``active``: the joining ones it has room
        for."""
        self._take(self.joining)

    def _take(self, line: collections.deque[Any]) -> None:
        active = self.active
        while line and len(active) < self.limit:
            req = line.popleft()
            if not req.gone:
                active.append(req)

    def _idle(self) -> bool:
        """No request in the batch: True ends the loop, False waits for one."""
        return True

    def _ended(self) -> None:
        """The loop has stopped (before its requests end)."""

    async def _step(self, batch: list[Any]) -> BaseException | None:
        """One ``step`` of the worker's instance over ``batch``, on the worker's device: each
        request gets the items it emitted and ends when its generation finished; if the step
        raises, every request of the batch ends with the error (the instance names the model and
        the step), which is returned. A process worker steps its instance in its worker process
        (its own ``step``: runtime/process/_steps.py), where a joining request's preprocess may fail
        that request alone."""
        start = time.perf_counter_ns()
        failed: dict[Generation, BaseException] | None = None
        try:
            remote = getattr(self.worker, "step", None)
            if remote is not None:  # a process worker: the model steps in its process
                failed = await remote([r.gen for r in batch])
            else:
                with using(getattr(self.worker, "device", CPU)):  # podium.device() in the step
                    await self.worker.instance.step([r.gen for r in batch])
        except Exception as exc:
            for req in batch:
                req.gen.take()
                req.end(exc)
            return exc
        self.stats.stepped(len(batch), time.perf_counter_ns() - start)
        for req in batch:
            gen = req.gen
            gen.first = False
            items = gen.take()
            if failed is not None and gen in failed:
                req.end(failed[gen])
                continue
            if gen.cancelled:
                continue
            if items:
                req.items.extend(items)
                req.wake.set()
            if gen.finished:
                req.end()
        return None

    async def run(self) -> None:
        worker, gate = self.worker, self.gate
        try:
            while True:
                self.active = [r for r in self.active if not r.gone]
                self._admit()
                if self.active:
                    if not self.holds_slot:
                        self.holds_slot = gate.try_acquire_on(worker)
                else:
                    if self.holds_slot:
                        self.holds_slot = False
                        gate.release(worker)
                    if self._idle():
                        return
                batch = [r for r in self.active if not r.full]  # a full buffer sits out
                if not batch:
                    self.wake.clear()
                    await self.wake.wait()
                    continue
                await self._step(batch)
        finally:
            self._ended()
            if self.holds_slot:
                self.holds_slot = False
                gate.release(worker)
            for req in (*self.active, *self.joining):
                req.end(self.stopped())
