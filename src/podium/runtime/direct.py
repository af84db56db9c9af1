"""Direct scheduling: each request runs through the model on its own, under predict_concurrency."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from typing import Any

from ..types import ModelInstance
from ._line import QueuePolicy
from ._scheduler import PoolScheduler
from ._stats import VersionStats, postprocess, preprocess
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

    def stream(self, inputs: Any, request: Any) -> AsyncGenerator[Any, None]:
        caps = self._pool.instance.capabilities
        return self._stream(inputs, request, caps.streaming or caps.returns_streams)
