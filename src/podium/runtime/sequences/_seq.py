"""The pieces of the sequence scheduler: one open sequence and its turn, the memory of closed
ids."""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any

from ...types import Context
from .._line import Line

if TYPE_CHECKING:
    from .._collector import Pending
    from ._lane import Lane

__all__ = ["ClosedIds", "Sequence"]


class Sequence:
    """One open sequence: its state, the lane (worker) it is pinned to, and its turn.

    Exactly one request of a sequence holds the turn (``busy``) at a time; the others wait in
    ``turns`` in arrival order, and the turn is handed straight to the oldest of them (with
    ``busy`` still set). ``turns`` is bounded by ``max_sequence_queue_size``.
    """

    __slots__ = (
        "id",
        "state",
        "lane",
        "created",
        "last",
        "busy",
        "running",
        "turns",
        "first",
        "closed",
        "batched",
    )

    def __init__(self, sid: str, lane: Lane, now: float, max_waiting: int) -> None:
        self.id = sid
        self.state: dict[str, Any] = {}
        self.lane = lane
        self.created = now
        self.last = now  # when it last had nothing running: the idle clock
        self.busy = False
        self.running = 0  # streams still running (with continuous batching, several at once)
        # the turn handed to a request cancelled as it was handed goes to the next one
        self.turns: Line[Sequence] = Line(Sequence.pass_turn, max_waiting)
        self.first = True  # no request of it has started yet
        self.closed: str | None = None  # why it is over, once it is
        self.batched: Pending | None = None  # its request in a batch (queued or running)

    def try_take_turn(self) -> bool:
        """Take the turn if nobody holds it and nobody waits for it."""
        if self.busy or self.turns:
            return False
        self.busy = True
        return True

    def pass_turn(self) -> None:
        """The request holding the turn is done with it: the oldest waiting request takes it,
        or it is free."""
        if not (self.turns and self.turns.hand(self)):
            self.busy = False

    def context(self, last: bool = False) -> Context:
        """The context of the request that takes the turn now (``last``: the client says it
        ends the sequence)."""
        ctx = Context(self.id, first=self.first, state=self.state, last=last)
        self.first = False
        return ctx


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
