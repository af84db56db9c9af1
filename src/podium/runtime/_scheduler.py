"""What every scheduler offers the registry and the data plane, and keeps of its pool; the
requests a scheduler owns (and, re-exported, the :class:`TaskSet` of the tasks it owns)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import UnsupportedRepresentation
from ..types import ModelInstance, SequenceRef
from ._clock import TaskSet
from ._stats import preprocess
from .process import WorkerGone

if TYPE_CHECKING:
    from .workers import WorkerPool

__all__ = [
    "Activity",
    "PoolScheduler",
    "Scheduler",
    "SequenceScheduling",
    "TaskSet",
    "stream_inputs_through",
    "stream_through",
]

_now = time.perf_counter_ns


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

    @property
    def in_flight(self) -> int:
        """Requests in the scheduler now, waiting or running (what it drains)."""
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


class PoolScheduler:
    """What every scheduler of a version's :class:`~podium.runtime.workers.WorkerPool` keeps:
    the pool, its gate, label and counters, and the requests inside it (:attr:`in_flight`,
    what :meth:`drain` waits out before the workers stop)."""

    def __init__(self, pool: WorkerPool) -> None:
        self._pool = pool
        self._gate = pool.gate
        self._label = pool.label
        self._stats = pool.stats
        self._activity = Activity()

    @property
    def pool(self) -> WorkerPool:
        return self._pool

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        """Stop every worker; readers of running streams get ``Unavailable``, not a hang."""
        await self._pool.close()

    def statistics(self) -> dict[str, int]:
        """The pool's counters (slots, busy, waiting)."""
        return self._pool.statistics()

    async def drain(self) -> None:
        """Return once no request is in this scheduler (new ones may still arrive)."""
        await self._activity.drain()

    @property
    def in_flight(self) -> int:
        """Requests in this scheduler now, waiting or running."""
        return self._activity.count

    def stream_inputs(self, inputs: AsyncIterator[Any], request: Any) -> AsyncGenerator[Any, None]:
        """A model that reads a stream of requests reads it unbatched, outside any sequence."""
        return self._activity.through(stream_inputs_through(self._pool, inputs, request))

    def _stream(self, inputs: Any, request: Any, streams: bool) -> AsyncGenerator[Any, None]:
        """One request's items, one by one on a worker's slot where the model ``streams``
        (:func:`stream_through`), else its one answer."""
        if streams:
            return self._activity.through(stream_through(self._pool, inputs, request))
        return self._answer(inputs, request)

    async def _answer(self, inputs: Any, request: Any) -> AsyncGenerator[Any, None]:
        yield await self.infer(inputs, request)  # type: ignore[attr-defined]


class SequenceScheduling(Scheduler, Protocol):
    """A scheduler of stateful sequences (``sequence_batching``): each call names its place in
    a sequence, and the scheduler fills in the id it used and whether the sequence ended."""

    async def infer_in(self, sequence: SequenceRef, inputs: Any, request: Any) -> Any: ...

    def stream_in(
        self, sequence: SequenceRef, inputs: Any, request: Any
    ) -> AsyncGenerator[Any, None]: ...


async def stream_inputs_through(
    pool: WorkerPool, inputs: AsyncIterator[Any], request: Any
) -> AsyncGenerator[Any, None]:
    """A stream of requests through a model that reads it (``consumes_stream``), on the
    least-loaded ready thread worker, holding one slot for the whole stream. Each request is
    preprocessed as it is read."""
    if pool.instance.capabilities.has_preprocess:
        pre = pool.preprocessor()
        inputs = _preprocess_each(pre, inputs, request)
    gate = pool.gate
    worker = await _slot(pool)
    stream_inputs = getattr(worker, "stream_inputs", None)
    if stream_inputs is None:
        gate.release(worker)
        raise UnsupportedRepresentation(
            f"{pool.label} reads a stream of requests, which needs thread workers "
            f"(it runs in {worker.kind} workers)"
        )
    async with contextlib.aclosing(stream_inputs(inputs, request)) as items:
        async for item in items:
            yield item


async def _preprocess_each(
    pre: ModelInstance, inputs: AsyncIterator[Any], request: Any
) -> AsyncGenerator[Any, None]:
    async for item in inputs:
        yield await pre.preprocess(item, request)


async def _slot(pool: WorkerPool) -> Any:
    """A slot on the least-loaded ready worker; the wait is counted as queue time."""
    gate = pool.gate
    worker = gate.try_acquire()
    if worker is None:
        start = _now()
        worker = await gate.acquire()
        pool.stats.queue.add(_now() - start)
    else:
        pool.stats.unqueued += 1
    return worker


async def stream_through(pool: WorkerPool, inputs: Any, request: Any) -> AsyncGenerator[Any, None]:
    """One request through a streaming model: preprocess, then the items of the least-loaded
    ready worker's ``predict_stream`` (a worker that died before it got the request is
    skipped). The worker's slot is held until its stream ends."""
    if pool.instance.capabilities.has_preprocess:
        inputs = await preprocess(pool.stats, pool.preprocessor(), inputs, request)
    while True:
        worker = await _slot(pool)
        items = worker.stream(inputs, request)
        try:
            first = await anext(items)
        except StopAsyncIteration:
            return
        except WorkerGone:
            continue
        break
    try:
        yield first
        async for item in items:
            yield item
    finally:
        await items.aclose()
