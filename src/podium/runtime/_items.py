"""One request of a continuous batch, as its reader sees it: the items its generator produced
that the reader has not taken yet (at most ``limit``: the batch's step skips a request whose
buffer is full, which is the back-pressure), and how it ended. Shared by the continuous batching
scheduler and the continuous batches inside sequences."""

from __future__ import annotations

import asyncio
import collections
from typing import Any

from ..types import Generation

__all__ = ["ItemBuffer"]


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
