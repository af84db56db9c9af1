"""Continuous batching: a generating model advances its active requests step by step, and
requests join and leave between steps.

Each ready worker gets a *lane* (in the runtime, a lane is always what a scheduler keeps
for one worker: the requests placed on it and what feeds it): here one task that loops over its
instance's ``step(batch)`` with the requests active on that worker (at most ``batch_size``); a
process worker's ``step`` runs its instance's in the worker process (``process/_steps.py``). A
request is preprocessed on its own, then joins the least-loaded lane with room, or waits in one
bounded FIFO line (``QueueFull`` past ``max_queue_size``) until a lane has room. Between two steps a lane drops the
requests that finished or whose client left, and admits new ones. After a step each request's
emitted items go to its own buffer of ``stream_buffer`` items; a request whose buffer is full
sits out the following steps until its reader catches up, while the others keep going.
Design notes: docs/continuous.md.
"""

from __future__ import annotations

import collections
import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from ..config import ModelConfig
from ..errors import QueueFull, QueueTimeout, Unavailable, UnsupportedRepresentation, WorkerDied
from ..types import Generation
from ._clock import SYSTEM_CLOCK, Clock
from ._items import ItemBuffer, StepLoop
from ._line import queue_deadline, retry_after
from ._scheduler import PoolScheduler, TaskSet
from ._stats import preprocess
from .workers import Worker, WorkerPool, WorkerState

__all__ = ["ContinuousScheduler"]

_READY = WorkerState.READY  # compared for every request placed
_now = time.perf_counter_ns


class _Request(ItemBuffer):
    """One request (its generation, unread items, end) and when it was placed and when it
    joined a batch (perf_counter_ns: its queue time, then its compute time)."""

    __slots__ = ("lane", "placed", "joined")

    def __init__(self, gen: Generation, limit: int) -> None:
        super().__init__(gen, limit)
        self.placed = _now()
        self.joined = 0
        self.lane: _Lane | None = None

    def wake_lane(self) -> None:
        if self.lane is not None:
            self.lane.wake.set()


class _Lane(StepLoop):
    """One worker's lane: its continuous batch (requests in ``joining`` were placed here with
    room, and enter it before its next step; between steps it also takes from the scheduler's
    line), stepped by a task of the scheduler's."""

    __slots__ = ("owner", "lost")

    def __init__(self, worker: Worker, owner: ContinuousScheduler) -> None:
        super().__init__(worker, owner._gate, owner._stats, owner._batch_size, owner._stopped)
        self.owner = owner
        self.lost = False  # the worker takes no new requests (retired or replaced)

    @property
    def load(self) -> int:
        return len(self.active) + len(self.joining)

    def _admit(self) -> None:
        """The joining requests, then waiting ones from the line while there is room; each
        one's wait is counted as queue time."""
        first = len(self.active)
        self._take(self.joining)
        if not self.lost:
            self._take(self.owner._waiting)
        queue = self.stats.queue
        now = _now()
        for req in self.active[first:]:
            req.lane = self
            req.joined = now
            queue.add(now - req.placed)

    def _idle(self) -> bool:
        return self.lost  # a lost lane ends once its active requests have finished

    def _ended(self) -> None:
        lanes = self.owner._lanes
        if lanes.get(self.worker) is self:
            del lanes[self.worker]

    async def _step(self, batch: list[_Request]) -> BaseException | None:
        error = await super()._step(batch)
        if isinstance(error, WorkerDied):  # the process, and every generation it held, is gone
            for req in self.active:
                req.end(error)
        return error


class ContinuousScheduler(PoolScheduler):
    """Runs a ``continuous`` instance's ``step`` over a version's workers (threads or processes).

    ``stream(inputs, request)`` yields the items of one request as the steps emit them;
    ``infer`` gathers them into a list (the data plane streams continuous models and gathers
    on non-streaming routes itself).
    """

    def __init__(
        self, pool: WorkerPool, *, config: ModelConfig, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        super().__init__(pool)
        self._clock = clock
        self._max_wait = config.max_queue_delay_ms / 1000.0
        self._batch_size = max(config.batch_size, 1)
        self._max_waiting = config.max_queue_size
        self._buffer = max(config.stream_buffer, 1)
        self._lanes: dict[Worker, _Lane] = {}
        self._tasks = TaskSet()  # the lanes' loops
        self._waiting: collections.deque[_Request] = collections.deque()
        self._closed = False
        pool.on_worker_lost = self._on_worker_lost

    # -- the Scheduler protocol ----------------------------------------------------------------

    async def close(self) -> None:
        """Stop: the lanes stop, every waiting or active request fails with ``Unavailable``,
        the workers stop."""
        self._closed = True
        lanes = list(self._lanes.values())
        await self._tasks.cancel()
        for lane in lanes:  # (a lane whose task never ran)
            for req in (*lane.active, *lane.joining):
                req.end(self._stopped())
        while self._waiting:
            self._waiting.popleft().end(self._stopped())
        self._lanes.clear()
        await self._pool.close()

    def _stopped(self) -> Unavailable:
        return Unavailable(f"{self._label} stopped before this request finished")

    def statistics(self) -> dict[str, int]:
        """The pool's counters, ``active`` (requests in a batch), ``queued`` (waiting for room)
        and ``steps`` (steps run: the version's counter)."""
        stats = self._pool.statistics()
        stats["active"] = sum(lane.load for lane in self._lanes.values())
        stats["queued"] = sum(1 for r in self._waiting if not r.gone)
        stats["steps"] = self._stats.steps
        return stats

    async def infer(self, inputs: Any, request: Any) -> list[Any]:
        """Every item of one request, in order."""
        async with contextlib.aclosing(self.stream(inputs, request)) as items:
            return [item async for item in items]

    async def stream_inputs(
        self, inputs: AsyncIterator[Any], request: Any
    ) -> AsyncGenerator[Any, None]:
        raise UnsupportedRepresentation(
            f"{self._label} is served by continuous batching and does not read a stream of requests"
        )
        yield  # pragma: no cover  (an async generator, as the protocol says)

    async def stream(self, inputs: Any, request: Any) -> AsyncGenerator[Any, None]:
        """The items ``step`` emits for this request, in order, until it finishes. Leaving
        early (the client closed the stream) takes it out of its batch before the next step."""
        self._activity.enter()
        try:
            if self._closed:
                raise Unavailable(f"{self._label} is stopped")
            if self._pool.instance.capabilities.has_preprocess:
                inputs = await preprocess(self._stats, self._pool.preprocessor(), inputs, request)
            req = _Request(Generation(inputs, request), self._buffer)
            self._place(req)
            async with contextlib.aclosing(req.read(req.wake_lane)) as items:
                async for item in items:
                    yield item
            self._stats.generated(_now() - req.joined)
        finally:
            self._activity.leave()

    # -- placing requests ----------------------------------------------------------------------

    def _open_lanes(self) -> None:
        for worker in self._gate.workers:
            if worker.state is _READY and worker not in self._lanes:
                lane = self._lanes[worker] = _Lane(worker, self)
                self._tasks.spawn(lane.run())  # serves every request, not the one that opened it

    def _place(self, req: _Request) -> None:
        """Into the least-loaded lane with room, else the back of the line (or refused)."""
        self._open_lanes()
        if not self._waiting:
            best: _Lane | None = None
            for lane in self._lanes.values():
                if not lane.lost and lane.load < lane.limit:
                    if best is None or lane.load < best.load:
                        best = lane
            if best is not None:
                self._join(best, req)
                return
        if not self._lanes and not self._gate.starting:
            raise self._gate.none_coming()
        waiting = sum(1 for r in self._waiting if not r.gone)
        if waiting >= self._max_waiting:
            raise QueueFull.of(self._pool.model, waiting, self._max_waiting)
        self._time_out(req)
        self._waiting.append(req)

    def _time_out(self, req: _Request) -> None:
        """A waiting request's deadline (the model's ``max_queue_delay``, the request's own):
        past it, still waiting, it ends with ``QueueTimeout`` and never joins a batch; passed
        already: refused at once."""
        now = self._clock.now()
        end = queue_deadline(now, self._max_wait, self._pool.model)
        if end is None:
            return

        def expire() -> None:
            if req.lane is None and not req.gone:
                waited = self._clock.now() - now
                req.end(QueueTimeout.of(self._pool.model, waited, retry_after(self._max_wait)))

        self._clock.call_later(end - now, expire)

    @staticmethod
    def _join(lane: _Lane, req: _Request) -> None:
        req.lane = lane
        lane.joining.append(req)
        lane.wake.set()

    def _on_worker_lost(self, worker: Worker, how: str) -> None:
        """A retired or replaced worker: its lane takes no new requests and ends once its active
        ones have finished; the ones about to join it go back to the front of the line."""
        lane = self._lanes.get(worker)
        if lane is None:
            return
        lane.lost = True
        for req in reversed(lane.joining):
            req.lane = None
            self._waiting.appendleft(req)
        lane.joining.clear()
        lane.wake.set()
        for other in self._lanes.values():
            other.wake.set()  # one of them may take the returned requests
