"""Direct scheduling: each request runs through the model on its own, under predict_concurrency."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

from ..errors import Unavailable
from ..types import ModelInstance
from ._scheduler import SlotGate

__all__ = ["DirectScheduler"]

_END = object()


class _Failure:
    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class DirectScheduler:
    """Preprocess and postprocess run freely; only ``predict`` holds one of the slots.

    Streaming: a producer task runs the model's generator into a bounded buffer of
    ``stream_buffer`` items (back-pressure, not an unbounded queue) and frees the slot as soon as
    the generator finishes, so a slow reader does not hold a slot past the generator's own run.
    Stopping the consumer (client gone) cancels the producer, which closes the generator.
    """

    def __init__(
        self,
        instance: ModelInstance,
        *,
        model: str,
        concurrency: int,
        max_queue_size: int,
        stream_buffer: int = 16,
    ) -> None:
        self._instance = instance
        self._gate = SlotGate(model, concurrency, max_queue_size)
        self._buffer = stream_buffer
        self._producers: dict[asyncio.Task[None], asyncio.Queue[Any]] = {}
        self._model = model

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        """Stop every running stream; their readers get ``Unavailable``, not a hang."""
        producers = dict(self._producers)
        for task in producers:
            task.cancel()
        if producers:
            await asyncio.gather(*producers, return_exceptions=True)
        failure = _Failure(Unavailable(f"model '{self._model}' was unloaded mid-stream"))
        for queue in producers.values():
            while True:  # the reader must see the failure even if the buffer is full
                try:
                    queue.put_nowait(failure)
                    break
                except asyncio.QueueFull:
                    queue.get_nowait()

    def statistics(self) -> dict[str, int]:
        return self._gate.statistics()

    async def infer(self, inputs: Any, request: Any) -> Any:
        inst = self._instance
        if inst.has_preprocess:
            inputs = await inst.preprocess(inputs, request)
        if not self._gate.try_acquire():
            await self._gate.acquire()
        try:
            outputs = await inst.predict(inputs, request)
        finally:
            self._gate.release()
        if inst.has_postprocess:
            outputs = await inst.postprocess(outputs, request)
        return outputs

    async def stream(self, inputs: Any, request: Any) -> AsyncGenerator[Any, None]:
        inst = self._instance
        if not inst.streaming:
            yield await self.infer(inputs, request)
            return
        if inst.has_preprocess:
            inputs = await inst.preprocess(inputs, request)
        await self._gate.acquire()
        queue: asyncio.Queue[Any] = asyncio.Queue(self._buffer)
        task = asyncio.get_running_loop().create_task(self._produce(inputs, request, queue))
        self._producers[task] = queue
        task.add_done_callback(self._forget)
        try:
            while True:
                item = await queue.get()
                if item is _END:
                    return
                if isinstance(item, _Failure):
                    raise item.exc
                yield item
        finally:
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._producers.pop(task, None)

    async def _produce(self, inputs: Any, request: Any, queue: asyncio.Queue[Any]) -> None:
        items = self._instance.predict_stream(inputs, request)
        outcome: Any = _END
        try:
            async for item in items:
                await queue.put(item)
        except Exception as exc:
            outcome = _Failure(exc)
        finally:
            try:
                await items.aclose()
            finally:
                self._gate.release()  # before the last put: a slow reader must not hold the slot
        await queue.put(outcome)
