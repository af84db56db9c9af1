"""The pieces of the sequence scheduler: one open sequence, one worker's lane, the closed-id memory."""

from __future__ import annotations

import asyncio
import collections
from typing import Any

from ..types import Context

__all__ = ["ClosedIds", "Entry", "Lane", "Sequence"]


class Sequence:
    """One open sequence: its state, the worker it is pinned to, and its turn.

    Exactly one request of a sequence holds the turn (``busy``) at a time; the others wait in
    ``waiters`` in arrival order, and the turn is handed straight to the oldest of them.
    """

    __slots__ = (
        "id",
        "state",
        "lane",
        "created",
        "last",
        "busy",
        "running",
        "waiters",
        "first",
        "closed",
    )

    def __init__(self, sid: str, lane: Lane, now: float) -> None:
        self.id = sid
        self.state: dict[str, Any] = {}
        self.lane = lane
        self.created = now
        self.last = now  # when it last had nothing running: the idle clock
        self.busy = False
        self.running = 0  # streams still running (with continuous batching, several at once)
        self.waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self.first = True  # no request of it has started yet
        self.closed: str | None = None  # why it is over, once it is

    def context(self, last: bool = False) -> Context:
        """The context of the request that takes the turn now (``last``: the client says it
        ends the sequence)."""
        ctx = Context(self.id, first=self.first, state=self.state, last=last)
        self.first = False
        return ctx


class Entry:
    """A request of a sequence waiting for (or in) a batch on its worker."""

    __slots__ = ("seq", "ctx", "inputs", "request", "future", "arrived", "task")

    def __init__(
        self,
        seq: Sequence,
        ctx: Context,
        inputs: Any,
        request: Any,
        future: asyncio.Future[Any],
        arrived: float,
    ) -> None:
        self.seq = seq
        self.ctx = ctx
        self.inputs = inputs
        self.request = request
        self.future = future
        self.arrived = arrived
        self.task: asyncio.Task[None] | None = None  # the batch it runs in, once taken


class Lane:
    """What the scheduler keeps for one worker: its sequences, the requests waiting for one of
    its slots (each with its sequence), and, when batching, the requests waiting for a batch."""

    __slots__ = ("worker", "sequences", "slot_waiters", "queue", "arrived", "collector", "lost")

    def __init__(self, worker: Any) -> None:
        self.worker = worker
        self.sequences: set[Sequence] = set()
        self.slot_waiters: collections.deque[tuple[asyncio.Future[None], Sequence | None]] = (
            collections.deque()
        )
        self.queue: collections.deque[Entry] = collections.deque()
        self.arrived = asyncio.Event()
        self.collector: asyncio.Task[None] | None = None
        self.lost: str | None = None  # why its sequences are gone, once the worker is


class ClosedIds:
    """The ids of closed sequences and why they closed, the most recent ``size`` of them (LRU):
    a request naming one is refused with the reason instead of starting a fresh sequence."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._ids: collections.OrderedDict[str, str] = collections.OrderedDict()

    def add(self, sid: str, reason: str) -> None:
        self._ids[sid] = reason
        self._ids.move_to_end(sid)
        while len(self._ids) > self._size:
            self._ids.popitem(last=False)

    def get(self, sid: str) -> str | None:
        reason = self._ids.get(sid)
        if reason is not None:
            self._ids.move_to_end(sid)
        return reason

    def __len__(self) -> int:
        return len(self._ids)
