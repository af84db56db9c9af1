"""Dynamic batching: requests queue per model and ``predict`` receives a list.

A batch closes when it holds ``batch_size`` requests, or ``max_batch_delay`` after its first
request arrived, whichever comes first. Each request runs its own ``preprocess`` before joining
the queue and its own ``postprocess`` after its result comes back. The queue is bounded by
``max_queue_size``; a full queue refuses at once (503). A request whose client left before its
batch formed is dropped from the queue; a running batch whose clients have all left is cancelled.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from ..errors import BadModelOutput, QueueFull, Unavailable
from ..types import ModelInstance
from ._scheduler import Activity
from .direct import stream_inputs_through, stream_through
from .process import Failed, WorkerGone
from .workers import Worker, WorkerPool

__all__ = ["BatchScheduler"]

logger = logging.getLogger("podium.batcher")


class _Entry:
    __slots__ = ("inputs", "request", "future", "arrived", "worker")

    def __init__(
        self, inputs: Any, request: Any, future: asyncio.Future[Any], arrived: float
    ) -> None:
        self.inputs = inputs
        self.request = request
        self.future = future
        self.arrived = arrived
        self.worker: Worker | None = None


class BatchScheduler:
    """Collects requests into batches for a model whose ``predict`` takes a list.

    ``predict`` gets the list of (preprocessed) inputs, and, if it takes the request, the list of
    the requests in the same order; it must return a list of the same length. ``target`` is the
    version's :class:`WorkerPool` (or one loaded instance); each batch goes to the least-loaded
    ready worker, at most ``predict_concurrency`` batches per worker at a time. A batch whose
    worker process died before it was sent goes back to the front of the queue.
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
    ) -> None:
        if isinstance(target, WorkerPool):
            self._pool = target
        else:
            self._pool = WorkerPool.single(
                target, model=model, concurrency=concurrency, max_waiting=1 << 30
            )
        self._gate = self._pool.gate
        self._model = model
        self._batch_size = batch_size
        self._delay = max_batch_delay_ms / 1000.0
        self._max_queue = max_queue_size
        self._queue: collections.deque[_Entry] = collections.deque()
        self._arrived = asyncio.Event()
        self._activity = Activity()
        self._loop_task: asyncio.Task[None] | None = None
        self._batches: set[asyncio.Task[None]] = set()
        self._closed = False
        self.batches_run = 0

    async def start(self) -> None:
        if self._loop_task is None:
            self._loop_task = asyncio.get_running_loop().create_task(self._collect())

    async def close(self) -> None:
        """Stop collecting; every request still queued or in a running batch fails at once."""
        self._closed = True
        tasks = [t for t in (self._loop_task, *self._batches) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._loop_task = None
        while self._queue:
            self._fail_stopped(self._queue.popleft())
        await self._pool.close()

    @property
    def pool(self) -> WorkerPool:
        return self._pool

    async def drain(self) -> None:
        """Return once no request is in this scheduler (new ones may still arrive)."""
        await self._activity.drain()

    def _fail_stopped(self, entry: _Entry) -> None:
        if not entry.future.done():
            entry.future.set_exception(
                Unavailable(f"model '{self._model}' stopped before this request finished")
            )

    def statistics(self) -> dict[str, int]:
        stats = self._pool.statistics()
        stats["queued"] = len(self._queue)
        stats["batches"] = self.batches_run
        return stats

    async def infer(self, inputs: Any, request: Any) -> Any:
        self._activity.enter()
        try:
            return await self._infer(inputs, request)
        finally:
            self._activity.leave()

    async def _infer(self, inputs: Any, request: Any) -> Any:
        pool = self._pool
        inst = pool.instance
        if inst.has_preprocess:
            inputs = await pool.preprocessor().preprocess(inputs, request)
        if self._closed:
            raise Unavailable(f"model '{self._model}' is stopped")
        if len(self._queue) >= self._max_queue:
            raise QueueFull.of(self._model, len(self._queue), self._max_queue)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        entry = _Entry(inputs, request, future, loop.time())
        self._queue.append(entry)
        self._arrived.set()
        outputs = await future
        if inst.has_postprocess and entry.worker is not None:
            outputs = await entry.worker.instance.postprocess(outputs, request)
        return outputs

    def stream_inputs(self, inputs: AsyncIterator[Any], request: Any) -> AsyncGenerator[Any, None]:
        """A model that reads a stream of requests reads it unbatched."""
        return self._activity.through(stream_inputs_through(self._pool, inputs, request))

    async def stream(self, inputs: Any, request: Any) -> AsyncGenerator[Any, None]:
        """A batched ``predict``'s one result; a streaming model (an MLServer runtime with
        ``predict_stream`` and adaptive batching) streams its request unbatched, as MLServer does."""
        if not self._pool.instance.streaming:
            yield await self.infer(inputs, request)
            return
        async with contextlib.aclosing(
            self._activity.through(stream_through(self._pool, inputs, request))
        ) as items:
            async for item in items:
                yield item

    def _live(self) -> int:
        while self._queue and self._queue[0].future.done():
            self._queue.popleft()
        return sum(1 for e in self._queue if not e.future.done())

    async def _collect(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while not self._live():
                self._arrived.clear()
                await self._arrived.wait()
            # The delay runs from the arrival of the oldest request still waiting (_live() has
            # dropped the abandoned ones from the front), not from when the collector woke.
            deadline = self._queue[0].arrived + self._delay
            while self._live() < self._batch_size:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                self._arrived.clear()
                try:
                    await asyncio.wait_for(self._arrived.wait(), remaining)
                except TimeoutError:
                    break
            worker = await self._gate.acquire()
            batch: list[_Entry] = []
            while self._queue and len(batch) < self._batch_size:
                entry = self._queue.popleft()
                if not entry.future.done():
                    batch.append(entry)
            if not batch:
                self._gate.release(worker)
                continue
            task = loop.create_task(self._run(batch, worker))
            self._batches.add(task)
            task.add_done_callback(self._batches.discard)

            def fail_unanswered(done: asyncio.Future[Any], batch: list[_Entry] = batch) -> None:
                # cancelled by close(), even before it started: nobody must wait forever
                if done.cancelled() or done.exception() is not None:
                    for e in batch:
                        self._fail_stopped(e)

            def abandon(
                _: asyncio.Future[Any], task: asyncio.Task[None] = task, batch: list[_Entry] = batch
            ) -> None:
                if all(e.future.cancelled() for e in batch):
                    task.cancel()

            task.add_done_callback(fail_unanswered)
            for entry in batch:
                entry.future.add_done_callback(abandon)

    async def _run(self, batch: list[_Entry], worker: Worker) -> None:
        self.batches_run += 1
        inputs = [e.inputs for e in batch]
        requests = [e.request for e in batch]
        try:
            outputs = await worker.batch(inputs, requests)  # gives the slot back
            if not isinstance(outputs, list | tuple):
                raise BadModelOutput(
                    f"model '{self._model}' predict must return a list for a batch of "
                    f"{len(batch)} requests, got {type(outputs).__name__}"
                )
            if len(outputs) != len(batch):
                raise BadModelOutput(
                    f"model '{self._model}' predict returned {len(outputs)} results for a "
                    f"batch of {len(batch)} requests"
                )
        except WorkerGone:
            # never reached the worker: back to the front of the line, in order
            self.batches_run -= 1
            self._queue.extendleft(reversed(batch))
            self._arrived.set()
            return
        except Exception as exc:
            for e in batch:
                if not e.future.done():
                    e.future.set_exception(exc)
            return
        for e, out in zip(batch, outputs, strict=True):
            if e.future.done():
                continue
            if isinstance(out, Failed):
                e.future.set_exception(out.exception())
            else:
                e.worker = worker
                e.future.set_result(out)
