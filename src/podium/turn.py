"""Holding writes until the end of the event loop's turn: :class:`TurnBuffer`; the running
loop without a system call: :func:`running_loop`.

Some places write small things often (access lines, frames to and from worker processes).
Each write is a system call; the writes made in one turn of the
event loop go together in one, made by a callback the first of them schedules (``call_soon``:
it runs before the loop waits again, so nothing is held longer than one turn).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from threading import get_ident
from typing import Generic, TypeVar

__all__ = ["TurnBuffer", "running_loop"]

T = TypeVar("T")

#: The thread that :func:`running_loop` last asked, and the loop it found running there.
_last: tuple[int, asyncio.AbstractEventLoop | None] = (0, None)


def running_loop() -> asyncio.AbstractEventLoop:
    """``asyncio.get_running_loop()``, without its system call on every request.

    On Python 3.11, ``get_running_loop()`` (and ``current_task()`` without a loop,
    ``Event.wait()``, ...) asks the kernel for the process's id (``getpid``) on every call, so
    that a child forked from a running loop does not use its parent's. Here the loop found is
    kept with its thread, and given again while it still runs on the thread that asks: only
    one loop runs on a thread at a time, so it is the running one. A forked child forgets it
    (``os.register_at_fork``, as Python 3.12's asyncio forgets its own). ``RuntimeError``
    where no loop runs on this thread, as ``get_running_loop()``.
    """
    global _last
    thread, loop = _last
    if loop is not None and thread == get_ident() and loop.is_running():
        return loop
    loop = asyncio.get_running_loop()
    _last = (get_ident(), loop)
    return loop


def _forget() -> None:
    global _last
    _last = (0, None)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget)


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
        loop = running_loop()
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
