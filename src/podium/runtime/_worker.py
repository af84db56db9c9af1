"""What every worker is, whatever runs its instance: kinds, states, the :class:`Worker` protocol
schedulers and the pool use, and the one queue-ahead rule both worker kinds follow.

The thread worker is in ``_thread_worker``, the pool in ``workers``, process workers in
``process/``; all of them build on this module.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol

from ..errors import WorkerDied
from ..types import ModelInstance

__all__ = [
    "QUEUE_AHEAD",
    "STUCK_GRACE",
    "Failure",
    "Moved",
    "RequestCodec",
    "Worker",
    "WorkerInfo",
    "WorkerKind",
    "WorkerState",
    "queue_ahead",
]

#: Seconds a timed-out sync predict gets to return before its thread worker is replaced.
STUCK_GRACE = 1.0
#: Requests a worker takes queued ahead of its predict slots, where it may (at least; as many
#: as its slots if more): they wait in the worker (the instance's own line for a predict
#: thread, or the worker process), so that a predict that ends finds the next request already
#: there instead of waiting for the event loop to hand the slot on (and, for a worker process,
#: for a round trip). Few enough that a long predict holds little work back from other workers.
QUEUE_AHEAD = 8


def queue_ahead(slots: int, config: Any) -> int:
    """How many requests a worker with ``slots`` predict slots takes queued ahead of them: the
    one rule for thread and process workers. They count as waiting, against
    ``max_queue_size``, so never more than that; none for a model with a queue policy
    (``max_queue_delay``, priority levels): its requests wait in the gate's line, where their
    deadlines and levels hold. With dynamic batching (``batch_size`` > 1) a place holds a
    batch, and a worker takes one batch ahead per slot: each predict that ends finds the next
    batch already there (with several slots, as many batches as there are, so that two ending
    close together both start at once), and arrivals still join the batch the collector forms
    behind them. A batch holds at least one request: never more places than the queue holds."""
    if config.max_queue_delay_ms > 0 or config.priority_levels > 1:
        return 0
    if config.batch_size > 1:
        return min(slots, config.max_queue_size)
    return min(max(QUEUE_AHEAD, slots), config.max_queue_size)


class WorkerKind(enum.StrEnum):
    """Where a worker runs its instance (``workers`` in a model's config names one)."""

    THREAD = "thread"  # in the server process
    PROCESS = "process"  # in a worker process of its own


class WorkerState(enum.StrEnum):
    """A worker's life: starting → ready → stopping → dead (it may die from any state)."""

    STARTING = "starting"
    READY = "ready"  # takes work
    STOPPING = "stopping"  # takes no new work; finishes (or fails) what it holds
    DEAD = "dead"


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """One worker as the management API shows it.

    ``pid`` is the process running the model's code: the worker process for ``process`` workers,
    the server's own pid for ``thread`` workers. ``busy`` counts the requests it holds.
    ``devices``: the GPU numbers it holds (empty: the CPU); ``device``: its model's
    ``podium.device()`` in the server's numbering (``cuda:2``, ``cpu``).
    """

    id: str
    pid: int | None
    kind: WorkerKind
    state: WorkerState
    busy: int
    started: float  # epoch seconds
    devices: tuple[int, ...] = ()
    device: str = "cpu"


class RequestCodec(Protocol):
    """How a front end's request object crosses into a worker process (implemented above runtime/).

    ``snapshot`` runs in the server and returns a picklable copy of the request (its body read).
    ``rebuild(snapshot, gone)`` runs in the worker process and returns the request the model
    gets; ``await gone()`` returns once the real client has left. ``rebuild`` travels to the
    worker by reference (pickled by module and name), so it is a module-level function: runtime/
    never names the module that defines it.
    """

    @property
    def rebuild(self) -> Callable[[Any, Callable[[], Awaitable[Any]]], Any]: ...

    async def snapshot(self, request: Any) -> Any: ...


class Worker(Protocol):
    """A worker as schedulers and the pool use it. Every call runs with a slot the caller took
    from the gate; the worker gives it back (``gate.release``) when its instance is done."""

    id: str
    kind: WorkerKind
    pid: int | None
    state: WorkerState
    busy: int
    capacity: int
    started: float
    instance: ModelInstance
    devices: tuple[int, ...]  # the GPUs it holds for life (none: the CPU)

    async def start(self) -> None: ...

    async def infer(self, inputs: Any, request: Any) -> Any: ...

    def stream(self, inputs: Any, request: Any) -> AsyncGenerator[Any, None]: ...

    async def batch(self, inputs: list[Any], requests: list[Any]) -> Any: ...

    def stuck(self) -> int:
        """Calls it still runs more than STUCK_GRACE seconds past their response_timeout."""
        ...

    async def close(self) -> None: ...


class Failure:
    """A stream's failure, in a worker's buffer of stream items (instead of ``END``)."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc: BaseException | None = exc

    def raise_once(self) -> NoReturn:
        """Raise what it holds, and hold it no more (one reader each). The error's traceback
        holds the reader's frame, which holds this: holding the error too would be a cycle,
        kept with the request's objects until a garbage collection."""
        error, self.exc = self.exc, None
        assert error is not None, "a failure is raised once"
        try:
            raise error
        finally:
            del error


class Moved(WorkerDied):
    """A request taken back, before its predict started, from a thread worker whose every
    predict thread is held by a call past response_timeout: the next worker takes it (the
    scheduler tries again, as for a worker that died before it got the request)."""
