"""The pieces of the sequence scheduler: one open sequence and its turn, the memory of closed
ids."""

from __future__ import annotations

import collections
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ...types import Context
from .._line import Line

if TYPE_CHECKING:
    from .._collector import Pending
    from ._lane import Lane

__all__ = ["ClosedIds", "Sequence"]


class Sequence:
    """The sequence open under one id: its state, the lane (worker) it is pinned to, and its turn.

    Exactly one request of the id holds the turn (``busy``) at a time; the others wait in
    ``turns`` in arrival order, and the turn is handed straight to the oldest of them (with
    ``busy`` still set). ``turns`` is bounded by ``max_sequence_queue_size``; requests that may
    wait for room in it (a request stream's) wait in ``room``, woken whenever the turn passes.

    A request with the start flag begins a new sequence under the same id when its turn comes
    (:meth:`restart`: fresh state, a new ``generation``), after the requests queued before it;
    ``ended`` says why the current one is over once a request or the model ended it while other
    requests of the id were still queued (each is then refused at its turn, unless it starts a
    new one).
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
        "room",
        "first",
        "generation",
        "ended",
        "closed",
        "batched",
    )

    def __init__(
        self,
        sid: str,
        lane: Lane,
        now: float,
        max_waiting: int,
        release: Callable[[Sequence], object] | None = None,
    ) -> None:
        self.id = sid
        self.state: dict[str, Any] = {}
        self.lane = lane
        self.created = now
        self.last = now  # when it last had nothing running: the idle clock
        self.busy = False
        self.running = 0  # streams still running (with continuous batching, several at once)
        # the turn handed to a request cancelled as it was handed goes on (``release``: the
        # owner's way to pass it, default :meth:`pass_turn`)
        self.turns: Line[Sequence] = Line(release or Sequence.pass_turn, max_waiting)
        # made when first needed (a deque is large for what it holds, and most sequences never
        # need it)
        self.room: Line[None] | None = None
        self.first = True  # no request of it has started yet
        self.generation = 0  # how many times a start flag began it again
        self.ended: str | None = None  # why the current sequence is over, while requests queue
        self.closed: str | None = None  # why it is over, once the id has no sequence open
        self.batched: Pending | None = None  # its request in a batch (queued or running)

    def try_take_turn(self) -> bool:
        """Take the turn if nobody holds it and nobody waits for it."""
        if self.busy or self.turns:
            return False
        self.busy = True
        return True

    def pass_turn(self) -> None:
        """The request holding the turn is done with it: the oldest waiting request takes it,
        or it is free; the requests waiting for room look again."""
        if not (self.turns and self.turns.hand(self)):
            self.busy = False
        room = self.room
        if room:
            while room.hand(None):
                pass

    def wait_for_room(self) -> Awaitable[None]:
        """Wait until the turn passes next (then look at ``turns`` again)."""
        if self.room is None:
            # woken all at once and each looks again: a wake-up lost to a cancellation is harmless
            self.room = Line(_nothing)
        return self.room.wait()

    def fail_waiting(self, error: Callable[[], BaseException]) -> None:
        """Every request waiting for the turn or for room leaves with ``error()``."""
        self.turns.fail_all(error)
        if self.room is not None:
            self.room.fail_all(error)

    @property
    def quiet(self) -> bool:
        """Nothing of it runs, holds the turn or waits."""
        return not (self.busy or self.running or self.turns or self.room)

    def restart(self, now: float) -> None:
        """Begin a new sequence under the same id: fresh state, its age counted from ``now``."""
        self.state = {}
        self.first = True
        self.created = now
        self.ended = None
        self.generation += 1

    def end(self, reason: str) -> None:
        """The current sequence is over (its state dropped) while requests of the id may still
        be queued."""
        self.ended = reason
        self.state = {}

    def context(self, last: bool = False) -> Context:
        """The context of the request that takes the turn now (``last``: the client says it
        ends the sequence)."""
        ctx = Context(self.id, first=self.first, state=self.state, last=last)
        self.first = False
        return ctx


def _nothing(_: object) -> None:
    return None


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
