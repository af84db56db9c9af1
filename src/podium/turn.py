"""Holding writes until the end of the event loop's turn: :class:`TurnBuffer`.

Some places write small things often (access lines, frames to and from worker processes).
Each write is a system call; the writes made in one turn of the
event loop go together in one, made by a callback the first of them schedules (``call_soon``:
it runs before the loop waits again, so nothing is held longer than one turn).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["TurnBuffer"]

T = TypeVar("T")


class TurnBuffer(Generic[T]):
    """Items held until the current turn of the running event loop ends, then handed together
    to ``flush`` (one call, a list of every item held, in order). :meth:`flush` hands them over
    at once (a write that must not wait, the end of the loop). A loop closed before its turn
    ended leaves nothing stuck: the next item added under another loop schedules there.
    Not thread-safe: it belongs to the loop's thread.
    """

    __slots__ = ("_flush", "_handle", "_items", "_loop")

    def __init__(self, flush: Callable[[list[T]], object]) -> None:
        self._flush = flush
        self._items: list[T] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.Handle | None = None

    def add(self, item: T) -> None:
        """Hold ``item`` until this turn of the running loop ends (``RuntimeError`` where no
        loop runs on this thread, and nothing is held)."""
        loop = asyncio.get_running_loop()
        self._items.append(item)
        if self._loop is not loop:
            self._loop = loop
            self._handle = loop.call_soon(self._turn_ended)

    def _turn_ended(self) -> None:
        self._loop = self._handle = None
        self.flush()

    def flush(self) -> None:
        """Hand every held item to ``flush`` now (nothing when none is held)."""
        handle = self._handle
        if handle is not None:
            handle.cancel()
            self._loop = self._handle = None
        if self._items:
            items, self._items = self._items, []
            self._flush(items)
