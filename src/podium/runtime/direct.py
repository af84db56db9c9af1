"""Direct scheduling: each request runs through the model on its own, under predict_concurrency."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from ..errors import UnsupportedRepresentation
from ..types import ModelInstance
from ._line import QueuePolicy
from ._scheduler import PoolScheduler, postprocess, preprocess
from ._stats import VersionStats
from .process import WorkerGone
from .workers import Moved, Worker, WorkerPool

__all__ = ["DirectScheduler"]

_now = time.perf_counter_ns


class DirectScheduler(PoolScheduler):
    """Preprocess and postprocess run freely; only ``predict`` holds one of the slots.

    ``target`` is the version's :class:`WorkerPool` (or one loaded instance, which gets a pool of
    one thread worker). Each request takes a slot on the least-loaded ready worker, or waits in
    the pool's bounded FIFO line (``QueueFull`` past ``max_queue_size``). Streaming goes through
    the worker's bounded buffer of ``stream_buffer`` items (back-pressure); the slot is freed as
    soon as the generator finishes. Stopping the consumer (client gone) cancels the producer,
    which closes the generator. A request whose worker process died before it was sent is
    given to another worker. The time each request waits for a slot, and its preprocess and
    postprocess, are counted in the pool's :attr:`~WorkerPool.stats`. ``policy``: how long a
    request may wait in the line and in which order waiters are served (the model's
    ``max_queue_delay`` and priorities); None: first come, first served, as long as it takes.
    """

    def __init__(
        self,
        target: ModelInstance | WorkerPool,
        *,
        model: str,
        concurrency: int = 1,
        max_queue_size: int = 1000,
        stream_buffer: int = 16,
        policy: QueuePolicy | None = None,
    ) -> None:
        if not isinstance(target, WorkerPool):
            target = WorkerPool.single(
                target,
                model=model,
                concurrency=concurrency,
                max_waiting=max_queue_size,
                stream_buffer=stream_buffer,
            )
        super().__init__(target)
        if policy is not None:
            self._gate.queue_policy(policy)
        self._model = model

    @property
    def stats(self) -> VersionStats:
        """The counters of the version this scheduler runs (its pool's)."""
        return self._stats

    async def close(self) -> None:
        """Stop every worker; readers of running streams get ``Unavailable``, not a hang."""
        await self._pool.close()

    def statistics(self) -> dict[str, int]:
        return self._pool.statistics()

    async def infer(self, inputs: Any, request: Any) -> Any:
        pool = self._pool
        caps = pool.instance.capabilities
        stats = self._stats
        self._activity.enter()
        try:
            if caps.has_preprocess:
                inputs = await preprocess(stats, pool.preprocessor(), inputs, request)
            while True:
                worker: Worker = self._gate.try_acquire()
                if worker is None:
                    start = _now()
                    worker = await self._gate.acquire()
                    stats.queue.add(_now() - start)
                else:
                    stats.unqueued += 1
                try:
                    outputs = await worker.infer(inputs, request)
                    break
                except (WorkerGone, Moved):
                    continue  # died before it got the request, or took it back: the next takes it
            if caps.has_postprocess:
                outputs = await postprocess(stats, worker.instance, outputs, request)
            return outputs
        finally:
            self._activity.leave()

    def stream_inputs(self, inputs: AsyncIterator[Any], request: Any) -> AsyncGenerator[Any, None]:
        return self._activity.through(stream_inputs_through(self._pool, inputs, request))

    async def stream(self, inputs: Any, request: Any) -> AsyncGenerator[Any, None]:
        pool = self._pool
        caps = pool.instance.capabilities
        if not (caps.streaming or caps.returns_streams):
            yield await self.infer(inputs, request)
            return
        async with contextlib.aclosing(
            self._activity.through(stream_through(pool, inputs, request))
        ) as items:
            async for item in items:
                yield item


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
