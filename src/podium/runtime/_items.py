"""One request of a continuous batch, as its reader sees it: the items its generator produced
that the reader has not taken yet (at most ``limit``: the batch's step skips a request whose
buffer is full, which is the back-pressure), and how it ended. Shared by the continuous batching
scheduler and the continuous batches inside sequences, with :func:`step`, which runs one step of
such a batch and hands each request what it emitted."""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from typing import Any

from ..devices import CPU, using
from ..types import Generation
from ._stats import VersionStats

__all__ = ["ItemBuffer", "step"]


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


async def step(
    worker: Any, batch: Sequence[ItemBuffer], stats: VersionStats
) -> BaseException | None:
    """One ``step`` of ``worker``'s instance over ``batch``, on the worker's device: each
    request gets the items it emitted and ends when its generation finished; if the step
    raises, every request of the batch ends with the error (the instance names the model and
    the step), which is returned. A process worker steps its instance in its worker process
    (its own ``step``: runtime/process/_steps.py), where a joining request's preprocess may fail
    that request alone."""
    start = time.perf_counter_ns()
    failed: dict[Generation, BaseException] | None = None
    try:
        remote = getattr(worker, "step", None)
        if remote is not None:  # a process worker: the model steps in its process
            failed = await remote([r.gen for r in batch])
        else:
            with using(getattr(worker, "device", CPU)):  # podium.device() in the step
                await worker.instance.step([r.gen for r in batch])
    except Exception as exc:
        for req in batch:
            req.gen.take()
            req.end(exc)
        return exc
    stats.stepped(len(batch), time.perf_counter_ns() - start)
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
