"""Dynamic batching: requests queue per model and ``predict`` receives a list.

A batch closes when it holds ``batch_size`` requests, or ``max_batch_delay`` after its first
request arrived, whichever comes first. Each request runs its own ``preprocess`` before joining
the queue and its own ``postprocess`` after its result comes back. The queue is bounded by
``max_queue_size``; a full queue refuses at once (503). A request whose client left before its
batch formed is dropped from the queue; a running batch whose clients have all left is cancelled.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Awaitable
from typing import Any

from ..errors import Unavailable
from ..types import ModelInstance
from ._clock import SYSTEM_CLOCK, Clock
from ._collector import BatchCollector, Pending
from ._line import QueuePolicy
from ._scheduler import PoolScheduler, TaskSet
from ._stats import postprocess, preprocess
from .process import Failed, WorkerGone
from .workers import Moved, Worker, WorkerPool

__all__ = ["BatchScheduler"]

logger = logging.getLogger("podium.batcher")


class BatchScheduler(PoolScheduler):
    """Collects requests into batches for a model whose ``predict`` takes a list.

    ``predict`` gets the list of (preprocessed) inputs, and, if it takes the request, the list of
    the requests in the same order; it must return a list of the same length. ``target`` is the
    version's :class:`WorkerPool` (or one loaded instance); each batch goes to the least-loaded
    ready worker, at most ``predict_concurrency`` batches per worker at a time (and as many more
    queued ahead in the worker, where it takes them: ``queue_ahead``). A batch whose worker
    process died before it was sent, or that a thread worker took back before it started (every
    predict thread held past ``response_timeout``), goes back to the front of the queue. ``clock`` times
    ``max_batch_delay`` (tests pass a manual one). ``max_queue_delay_ms``: the longest a request
    waits for its batch (0: only its own deadline bounds it); past it, it is refused with
    ``QueueTimeout`` when its batch is taken, without reaching the model. ``priority``: the
    queue's levels (the model's ``priority_levels``): a batch takes the highest levels first.
    """

    def __init__(
        self,
        target: ModelInstance | WorkerPool,
        *,
        model: str,
        batch_size: int,
        max_batch_delay_ms: float,
        max_queue_size: int,
        concurrency: int,
        clock: Clock = SYSTEM_CLOCK,
        max_queue_delay_ms: float = 0.0,
        priority: QueuePolicy | None = None,
    ) -> None:
        if not isinstance(target, WorkerPool):
            target = WorkerPool.single(
                target, model=model, concurrency=concurrency, max_waiting=1 << 30
            )
        super().__init__(target)
        self._model = model
        self._tasks = TaskSet()
        self._closed = False
        self._batches: BatchCollector[Worker] = BatchCollector(
            model=model,
            label=f"model '{model}'",
            size=batch_size,
            delay=max_batch_delay_ms / 1000.0,
            limit=max_queue_size,
            acquire=self._gate.acquire,
            release=self._gate.release,
            run=self._run_batch,
            tasks=self._tasks,
            stopped=self._stopped_error,
            retry_on=(WorkerGone, Moved),
            clock=clock,
            stats=self._pool.stats,
            max_wait=max_queue_delay_ms / 1000.0,
            priority=priority,
            placed=_placed,
        )

    async def start(self) -> None:
        self._batches.start()

    async def close(self) -> None:
        """Stop collecting; every request still queued or in a running batch fails at once."""
        self._closed = True
        await self._tasks.cancel()
        self._batches.fail_queued(lambda _: self._stopped_error())
        await self._pool.close()

    def _stopped_error(self) -> Unavailable:
        return Unavailable(f"model '{self._model}' stopped before this request finished")

    def statistics(self) -> dict[str, int]:
        stats = self._pool.statistics()
        stats["queued"] = self._batches.queued
        stats["batches"] = self._batches.batches_run
        return stats

    async def infer(self, inputs: Any, request: Any) -> Any:
        pool = self._pool
        caps = pool.instance.capabilities
        self._activity.enter()
        try:
            if caps.has_preprocess:
                inputs = await preprocess(pool.stats, pool.preprocessor(), inputs, request)
            if self._closed:
                raise Unavailable(f"model '{self._model}' is stopped")
            batches = self._batches
            pending = batches.add(inputs, request)  # QueueFull past max_queue_size
            try:
                outputs = await pending.future
            except BaseException:
                if pending.future.cancelled():  # its client left: its batch may be abandoned
                    batches.left(pending)
                # what it raised holds this frame (its traceback) and the future holds what it
                # raised: no cycle through them (it would wait for a garbage collection)
                del pending
                raise
            if isinstance(outputs, Failed):  # this request's own failure in a worker process
                raise outputs.exception()
            if caps.has_postprocess and pending.slot is not None:
                outputs = await postprocess(pool.stats, pending.slot.instance, outputs, request)
            return outputs
        finally:
            self._activity.leave()

    def stream(self, inputs: Any, request: Any) -> AsyncGenerator[Any, None]:
        """A batched ``predict``'s one result; a streaming model (an MLServer runtime with
        ``predict_stream`` and adaptive batching) streams its request unbatched, as MLServer does."""
        return self._stream(inputs, request, self._pool.instance.capabilities.streaming)

    @staticmethod
    def _run_batch(worker: Worker, batch: list[Pending]) -> Awaitable[Any]:
        return worker.batch([p.inputs for p in batch], [p.request for p in batch])


def _placed(worker: Worker) -> bool:
    """Whether a batch that just took a slot on ``worker`` waits there, queued ahead of its
    predict slots, behind running batches (``queue_ahead``)."""
    return worker.busy > getattr(worker, "slots", worker.capacity)
