"""Holding writes until the end of the event loop's turn: :class:`TurnBuffer`.

Several places write small things often (access lines, log lines, frames to and from worker
processes, completion signals). Each write is a system call; the writes made in one turn of the
event loop go together in one, made by a callback the first of them schedules (``call_soon``:
it runs before the loop waits again, so nothing is held longer than one turn).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Generic, TypeVar

__all__ = ["TurnBuffer"]

T = TypeVar("T")


class TurnBuffer(Generic[T]):
    """Items held until the current turn of the running event loop ends, then handed together
    to ``flush`` (one call, a list of every item held, in order). :meth:`flush` hands them over
    at once (a write that must not wait, the end of the loop). A loop closed before its turn
    ended leaves nothing stuck: the next item added under another loop schedules there.

    Not thread-safe by itself: a caller that adds or flushes from several threads passes
    ``lock`` and holds it around :meth:`add` and :meth:`flush`; the turn's end takes it too.
    """

    __slots__ = ("_flush", "_handle", "_items", "_lock", "_loop")

    def __init__(
        self, flush: Callable[[list[T]], object], *, lock: AbstractContextManager[Any] | None = None
    ) -> None:
        self._flush = flush
        self._lock = lock
        self._items: list[T] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.Handle | None = None

    def __len__(self) -> int:
        return len(self._items)

    def add(self, item: T) -> None:
        """Hold ``item`` until this turn of the running loop ends (``RuntimeError`` where no
        loop runs on this thread, and nothing is held)."""
        loop = asyncio.get_running_loop()
        self._items.append(item)
        if self._loop is not loop:
            self._loop = loop
            self._handle = loop.call_soon(self._turn_ended)

    def _turn_ended(self) -> None:
        if self._lock is None:
            self._loop = self._handle = None
            self.flush()
            return
        with self._lock:
            self._loop = self._handle = None
            self.flush()

    def flush(self) -> None:
        """Hand every held item to ``flush`` now (nothing when none is held)."""
        handle = self._handle
        if handle is not None and self._lock is None:
            # (a no-op when it is the one running). With a lock the call may be about to run
            # on the loop's thread while another flushes: it stays, and finds nothing.
            handle.cancel()
            self._loop = self._handle = None
        if self._items:
            items, self._items = self._items, []
            self._flush(items)
