"""Continuous batching on one worker, for the requests of the sequences pinned to it:
TorchServe's sequence continuous batching, for a ``continuous`` instance on a sequence model (a
TorchServe handler with ``sequenceBatching`` and ``continuousBatching`` that steps its requests
with ``context.stopping_criteria``).

One task loops while the worker has requests: it calls the instance's ``step`` with the requests
active on the worker, ``types.current_context`` set to their Contexts (a list, in the batch's
order), and hands each request the items the step emitted for it. A request joins between two
steps, at most ``limit`` at a time (TorchServe: twice ``batchSize``; the others wait in arrival
order), and leaves once it is finished, failed, or its reader left. As in the continuous
scheduler (``runtime/continuous``), each request has a buffer of ``stream_buffer`` items: a request
whose reader lags sits out the following steps until it catches up. A sequence's next request
may join while its previous one still streams (the scheduler passes the turn on at the first
item), so one step can hold both: a running stream and the request that cancels it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Callable
from typing import Any

from ...types import Context, Generation, current_context
from .._items import ItemBuffer, StepLoop
from .._scheduler import TaskSet
from .._stats import VersionStats

__all__ = ["Steps"]


class _Request(ItemBuffer):
    """One request (its generation, unread items, end) and its sequence's Context."""

    __slots__ = ("ctx",)

    def __init__(self, gen: Generation, ctx: Context, limit: int) -> None:
        super().__init__(gen, limit)
        self.ctx = ctx


class Steps(StepLoop):
    """The continuous batch of one worker (see the module docstring).

    ``gate`` gives the worker's slots: the loop holds one while it has requests (so the worker
    shows busy and a retiring worker waits). ``tasks`` owns the loop's task, which ends when
    the batch empties (the next request starts another); the scheduler cancels them on close:
    the requests then end with ``stopped()``. :meth:`lose` ends every request, and refuses new
    ones, once the worker is gone.
    """

    __slots__ = ("_buffer", "_tasks", "_task", "_lost")

    def __init__(
        self,
        worker: Any,
        gate: Any,
        *,
        limit: int,
        buffer: int,
        tasks: TaskSet,
        stopped: Callable[[], BaseException],
        stats: VersionStats | None = None,
    ) -> None:
        super().__init__(
            worker, gate, stats if stats is not None else VersionStats(), limit, stopped
        )
        self._buffer = max(buffer, 1)
        self._tasks = tasks
        self._task: asyncio.Task[None] | None = None
        self._lost: Callable[[Context], BaseException] | None = None

    @property
    def waiting(self) -> int:
        """Requests waiting to join the batch."""
        return sum(1 for r in self.joining if not r.gone)

    async def stream(self, ctx: Context, inputs: Any, request: Any) -> AsyncGenerator[Any, None]:
        """The items the steps emit for this request, in order, until it finishes. Leaving early
        (the client left) takes it out of the batch before the next step."""
        if self._lost is not None:
            raise self._lost(ctx)
        req = _Request(Generation(inputs, request), ctx, self._buffer)
        self.joining.append(req)
        self.wake.set()
        if self._task is None:
            self._task = self._tasks.spawn(self.run())
        async with contextlib.aclosing(req.read(self.wake.set)) as items:
            async for item in items:
                yield item

    def lose(self, error: Callable[[Context], BaseException]) -> None:
        """The worker is gone: every request ends with ``error(its context)``, new ones are
        refused with it (the loop, with no request left, ends)."""
        self._lost = error
        for req in (*self.active, *self.joining):
            req.end(error(req.ctx))
        self.active.clear()
        self.joining.clear()
        self.wake.set()

    def _ended(self) -> None:
        self._task = None

    async def _step(self, batch: list[_Request]) -> BaseException | None:
        token = current_context.set([r.ctx for r in batch])  # this task's own context
        try:
            return await super()._step(batch)
        finally:
            current_context.reset(token)
