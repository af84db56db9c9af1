"""What every scheduler offers the registry and the data plane, and the predict-slot gate."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, Protocol

from ..errors import QueueFull

__all__ = ["Scheduler", "SlotGate"]


class Scheduler(Protocol):
    """Runs requests through one model version: preprocess → predict → postprocess."""

    async def infer(self, inputs: Any, request: Any) -> Any:
        """The postprocessed result of one request."""
        ...

    def stream(self, inputs: Any, request: Any) -> AsyncIterator[Any]:
        """The items of one request, as a streaming ``predict`` produces them."""
        ...

    def statistics(self) -> dict[str, int]:
        """Counters for metrics and the management API (queue depth, busy slots...)."""
        ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...


class SlotGate:
    """``predict_concurrency`` slots with a bounded waiting line.

    A request that finds every slot busy and ``max_waiting`` requests already waiting is refused
    at once with ``QueueFull`` (503), instead of piling up. Cancelling a waiter removes it from
    the line without ever taking a slot.
    """

    def __init__(self, model: str, slots: int, max_waiting: int) -> None:
        self._model = model
        self._slots = slots
        self._sem = asyncio.Semaphore(slots)
        self._max_waiting = max_waiting
        self.waiting = 0
        self.busy = 0

    async def acquire(self) -> None:
        if self._sem.locked():
            if self.waiting >= self._max_waiting:
                raise QueueFull(
                    f"model '{self._model}' queue is full: {self.waiting} requests waiting "
                    f"(max_queue_size {self._max_waiting})"
                )
            self.waiting += 1
            try:
                await self._sem.acquire()
            finally:
                self.waiting -= 1
        else:
            await self._sem.acquire()
        self.busy += 1

    def release(self) -> None:
        self.busy -= 1
        self._sem.release()

    def statistics(self) -> dict[str, int]:
        return {"slots": self._slots, "busy": self.busy, "waiting": self.waiting}
