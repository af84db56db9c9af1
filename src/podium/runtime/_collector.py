"""Collecting requests into batches: the one piece under dynamic batching and the batches of
stateful sequences.

Requests join a queue (bounded: ``QueueFull`` past ``limit``). One collector task closes a
batch when it holds ``size`` requests, or ``delay`` seconds after the oldest request still
waiting arrived, whichever comes first, and hands it to a task of its own, which takes a slot
(``acquire``) and runs it (``run``). One batch is formed ahead: while every slot is busy, the next
batch already waits for one, and runs the moment one is freed, before the answers of the batch
that freed it are delivered (so the model is not idle while the server sends them); requests
that arrived meanwhile join it then, up to ``size``. The next batch forms once it has its slot,
while it runs. Where a worker takes batches queued ahead of its predict slots (a sync
``predict`` on thread workers, a worker process: ``queue_ahead``, one per slot), the owner's
slots count those places too: a batch formed ahead gets one at once and, closed, waits in the
worker, which starts it the moment a batch before returns, without waiting for this loop; the
batch formed behind them is the one later arrivals join. Such a batch still counts as queued
(against ``limit``) until a batch before it on that worker returns (the oldest waiting there
starts first). A request whose
client left before its batch closed is dropped from it; a running batch whose clients have all
left is cancelled. A batch's result must be a list (or tuple) as long as the batch; each request
gets its own item, or every request the batch's error.

What each request pays is kept to what it must: an arrival wakes the collector only when it
completes what the collector waits for (the first request, or a full batch; the delay has one
timer per batch), and once: the arrivals before the woken collector runs find that wake-up
pending (a server reads several requests in one turn of its loop). The queue is counted only
when it may hold a full batch, a request's deadline is looked at only once some request had
one, and its future is made on the loop the collector learned when it started (no
``get_running_loop``, a system call on CPython 3.11).
Whether a running batch's clients have all left is asked only when one leaves: the owner's
callers say so themselves (:meth:`BatchCollector.left`, when their wait for a request's future
is cancelled), so that no request pays a callback on its future.

The collector knows nothing of workers or models: its owner says how to take a slot, how to run
a batch on it, which errors mean "never reached the worker: queue it again", what a request
that was stopped gets, and which :class:`~podium.runtime._clock.Clock` times the delay.
"""

from __future__ import annotations

import asyncio
import collections
import functools
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Generic, TypeVar

import msgspec

from .. import tracing
from ..errors import QueueFull, QueueTimeout
from ..model import check_results
from ..types import current_request
from ._clock import SYSTEM_CLOCK, Clock
from ._line import QueuePolicy, queue_deadline, retry_after
from ._scheduler import TaskSet
from ._stats import VersionStats

__all__ = ["BatchCollector", "Pending"]

S = TypeVar("S")  # a slot: what ``acquire`` returns and ``run`` runs a batch on (a worker)

#: ``_wake_at`` while no arrival is to wake the collector
_NEVER = 1 << 62


class Pending(msgspec.Struct, eq=False):
    """One request in a batch queue: what it runs with, and its answer (``future``).

    ``tag`` is the owner's (a sequence's Context); ``task`` is the batch it runs in once its
    batch closed; ``slot`` is where it ran, once answered;
    ``trace``: where its span was when it joined, while tracing is on (``podium.tracing``);
    ``deadline``: when it must have left the queue, on the collector's clock (``max_wait``);
    ``level``: its priority level (1 the highest), with ``priority`` levels.

    A msgspec struct (fields in slots, compared by identity: ``eq=False``), not a class with
    an ``__init__``: every request makes one, and a struct is made in C, with its defaults,
    without a Python frame (bench/RESULTS.md §67).
    """

    inputs: Any
    request: Any
    tag: Any
    future: asyncio.Future[Any]
    arrived: float
    task: asyncio.Task[None] | None = None
    slot: Any = None
    trace: Any = None
    deadline: float | None = None
    level: int = 1


def _fail(batch: Iterable[Pending], error: Callable[[Pending], BaseException]) -> None:
    """Every request of ``batch`` still waiting fails with ``error(it)``."""
    for pending in batch:
        if not pending.future.done():
            pending.future.set_exception(error(pending))


def _join(task: asyncio.Task[None], joining: list[Pending]) -> None:
    """``joining`` run in ``task`` (what :meth:`BatchCollector.left` looks for)."""
    for pending in joining:
        pending.task = task


class BatchCollector(Generic[S]):
    """A bounded queue of requests and the task that closes and runs their batches.

    ``model`` is the name a full queue's ``QueueFull`` gives, ``label`` what a bad result's
    ``BadModelOutput`` names ("model 'm'", with its version if it has one); ``size`` is ``batch_size``, ``delay``
    ``max_batch_delay`` in seconds, ``limit`` the longest queue (None: unbounded, when the
    owner bounds what reaches it). ``acquire`` / ``release`` take and give back a slot to run a
    batch on; ``run(slot, batch)`` runs it and returns its results (the slot is the runner's to
    give back). A batch that raises one of ``retry_on`` never reached its slot: it goes back to
    the front of the queue, in order. ``stopped()`` is the error of a request whose batch was
    cancelled under it (the owner closing). Tasks run in the owner's ``tasks``. ``stats``: where
    each request's wait, from joining the queue to its batch starting, is counted (on
    ``clock``). ``max_wait``: seconds a request may wait for its batch (0: no limit but the
    request's own deadline, :attr:`podium.types.RequestInfo.deadline`; None: no deadlines at
    all); a request past its deadline when its batch is taken leaves with ``QueueTimeout``,
    without reaching the model. ``priority``: the queue's priority levels (a
    :class:`~podium.runtime._line.QueuePolicy` with several; None: first come, first served):
    a batch takes the waiting requests of the highest levels first, a request rising one level
    for each ``aging`` it has waited, as in the line. The owner's callers tell it when they
    leave (:meth:`left`, when their wait for ``future`` is cancelled): it watches no future
    itself. ``placed(slot)``: whether a batch that just took ``slot`` waits there behind
    running ones (a place ahead of a worker's predict slots); its requests count as queued until
    a batch before it on that slot returns.
    """

    def __init__(
        self,
        *,
        model: str,
        label: str,
        size: int,
        delay: float,
        limit: int | None,
        acquire: Callable[[], Awaitable[S]],
        release: Callable[[S], object],
        run: Callable[[S, list[Pending]], Awaitable[Any]],
        tasks: TaskSet,
        stopped: Callable[[], BaseException],
        retry_on: tuple[type[BaseException], ...] = (),
        clock: Clock = SYSTEM_CLOCK,
        stats: VersionStats | None = None,
        max_wait: float | None = None,
        priority: QueuePolicy | None = None,
        placed: Callable[[S], bool] | None = None,
    ) -> None:
        self._model = model
        self._max_wait = max_wait
        self._priority = priority if priority is not None and priority.levels > 1 else None
        self._stats = stats
        self._label = label
        self._size = size
        self._delay = delay
        self._limit = limit
        self._acquire = acquire
        self._release = release
        self._run = run
        self._tasks = tasks
        self._stopped = stopped
        self._retry_on = retry_on
        self._clock = clock
        self._now = clock.now
        self._queue: collections.deque[Pending] = collections.deque()
        self._arrived = asyncio.Event()
        # the queue's length at which an arrival wakes the collector: 1 while it waits for a
        # first request, ``size`` while it waits for a batch to fill, never while it waits for
        # a slot (it looks at the queue itself when it has one)
        self._wake_at = 1
        # whether some request had a deadline: only then is each batch searched for late ones
        self._timed = False
        self._collector: asyncio.Task[None] | None = None
        # the event loop it runs on, from start(): each request's future is made on it without
        # asking for the running loop (on CPython 3.11 that asks the kernel for the pid, a
        # system call per request)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._slotted = asyncio.Event()  # the batch formed ahead has its slot, or is gone
        self._ahead: list[Pending] = []  # the batch formed ahead, while it waits for its slot
        # each batch's task and its requests, until it ends (what left() looks at)
        self._running: dict[asyncio.Task[None], list[Pending]] = {}
        self._placed = placed
        # batches queued in a worker behind running ones (slot, batch, its length), the oldest
        # first, and how many requests they hold
        self._waiting_in: list[tuple[Any, list[Pending], int]] = []
        self._placed_n = 0
        self.batches_run = 0

    @property
    def queued(self) -> int:
        """Requests waiting: in the queue, in the batch formed ahead that waits for its slot, or
        in a batch queued in a worker behind running ones (a request that left is counted until
        the collector drops it)."""
        return len(self._queue) + len(self._ahead) + self._placed_n

    def start(self) -> None:
        """Start the collector task (:meth:`add` starts it too, if need be)."""
        if self._collector is None:
            self._loop = asyncio.get_running_loop()
            self._collector = self._tasks.spawn(self._collect())

    def stop(self) -> None:
        """Stop collecting (the slots are gone); batches already running go on."""
        if self._collector is not None:
            self._collector.cancel()

    def add(self, inputs: Any, request: Any, tag: Any = None) -> Pending:
        """Queue one request; its answer is ``.future``. ``QueueFull`` past ``limit``."""
        queue = self._queue
        if self._limit is not None:
            queued = len(queue) + len(self._ahead) + self._placed_n  # (``queued``, inline)
            if queued >= self._limit:
                raise QueueFull.of(self._model, queued, self._limit)
        loop = self._loop
        if loop is None:  # the first request starts the collector (if its owner did not)
            self.start()
            loop = self._loop
            assert loop is not None
        pending = Pending(inputs, request, tag, loop.create_future(), self._now())
        if self._max_wait is not None:
            deadline = pending.deadline = queue_deadline(
                pending.arrived, self._max_wait, self._model
            )
            if deadline is not None:
                self._timed = True
        if self._priority is not None:
            info = current_request.get()
            pending.level = self._priority.level(0 if info is None else info.priority)
        hooks = tracing.hooks
        if hooks is not None:
            pending.trace = hooks.waiting()
        queue.append(pending)
        if len(queue) >= self._wake_at:
            # One wake-up for the arrivals before the collector runs (a server reads a tick's
            # worth of requests, each to this point, before the woken collector's turn): the
            # collector sets ``_wake_at`` again before it waits again.
            self._wake_at = _NEVER
            self._arrived.set()
        return pending

    def left(self, pending: Pending) -> None:
        """The caller waiting for ``pending.future`` was cancelled (its client left): if its
        batch runs and all its clients have left, the batch is cancelled (a request still
        queued is dropped when its batch is taken)."""
        task = pending.task
        if task is not None:
            batch = self._running.get(task)
            if batch is not None and all(p.future.cancelled() for p in batch):
                task.cancel()

    def fail_queued(self, error: Callable[[Pending], BaseException]) -> None:
        """Every request still queued fails with ``error(it)`` (the owner stops, or its worker
        was lost)."""
        queue, self._queue = self._queue, collections.deque()
        _fail(queue, error)

    def _waiting(self) -> bool:
        """Whether a request still waits in the queue; the ones that left are dropped from its
        front, so that the first is the oldest still waiting."""
        queue = self._queue
        while queue and queue[0].future.done():
            queue.popleft()
        return bool(queue)

    def _full(self) -> bool:
        """Whether a full batch waits (counted only when the queue is long enough to hold one:
        requests that left may still be in it)."""
        queue, size = self._queue, self._size
        if len(queue) < size:
            return False
        for pending in queue:  # (the oldest first: those are what a batch takes)
            if not pending.future.done():
                size -= 1
                if not size:
                    return True
        return False

    async def _collect(self) -> None:
        clock = self._clock
        arrived = self._arrived
        while True:
            while not self._waiting():
                arrived.clear()
                self._wake_at = 1
                await arrived.wait()
            # The delay runs from the arrival of the oldest request still waiting (the ones
            # that left have been dropped from the front), not from when the collector woke;
            # one timer for it, and an arrival wakes the collector only when the batch is full.
            deadline = self._queue[0].arrived + self._delay
            timer = None
            rang = [False]

            def ring(rang: list[bool] = rang) -> None:
                rang[0] = True
                arrived.set()

            try:
                while not self._full():
                    remaining = deadline - self._now()
                    if remaining <= 0:
                        break
                    arrived.clear()
                    # a timer may ring early (uvloop's count whole milliseconds): then another
                    if timer is None or rang[0]:
                        rang[0] = False
                        timer = clock.call_later(remaining, ring)
                    self._wake_at = self._size
                    await arrived.wait()
            finally:
                self._wake_at = _NEVER
                if timer is not None:
                    timer.cancel()
            batch: list[Pending] = []
            self._take(batch)
            if not batch:
                continue
            slotted = self._slotted
            slotted.clear()
            self._ahead = batch
            task = self._tasks.spawn(self._run_batch(batch))
            self._running[task] = batch
            _join(task, batch)

            def fail_unanswered(done: asyncio.Task[None], batch: list[Pending] = batch) -> None:
                # cancelled by the owner's close, even before it started: nobody waits forever
                if done.cancelled() or done.exception() is not None:
                    _fail(batch, lambda _: self._stopped())

            task.add_done_callback(fail_unanswered)
            task.add_done_callback(functools.partial(self._gone, slotted, batch))
            await slotted.wait()  # one batch ahead at most

    def _gone(self, slotted: asyncio.Event, batch: list[Pending], task: asyncio.Task[None]) -> None:
        # a batch task that ended (cancelled before it ran, even) is no longer ahead
        self._running.pop(task, None)
        if self._ahead is batch:
            self._ahead = []
        slotted.set()

    def _take(self, batch: list[Pending]) -> None:
        """Move requests still waiting from the front of the queue into ``batch``, up to
        ``size`` (the ones whose client left are dropped)."""
        queue, size = self._queue, self._size
        if self._priority is not None and len(queue) > size - len(batch):
            self._take_by_level(batch)
        while queue and len(batch) < size:
            pending = queue.popleft()
            if not pending.future.done():
                batch.append(pending)
        if self._timed:
            self._refuse_late(batch)
            if len(batch) < size and queue:  # room again: the next ones in line
                self._take(batch)

    def _take_by_level(self, batch: list[Pending]) -> None:
        """Fill ``batch`` with the waiting requests of the highest levels (aged), the oldest
        first within a level; the others stay in the queue, in their order."""
        policy = self._priority
        assert policy is not None
        queue, room = self._queue, self._size - len(batch)
        now, aging = self._now(), policy.aging
        live = [p for p in queue if not p.future.done()]
        ranked = sorted(
            live, key=lambda p: (max(0.0, p.level - 1 - (now - p.arrived) // aging), p.arrived)
        )
        chosen = ranked[:room]
        taken = {id(p) for p in chosen}
        queue.clear()
        queue.extend(p for p in live if id(p) not in taken)
        batch.extend(chosen)

    def _refuse_late(self, batch: list[Pending]) -> None:
        """Requests of ``batch`` past their deadline leave it with ``QueueTimeout``, unrun."""
        now = self._now()
        late = False
        for pending in batch:
            deadline = pending.deadline
            if deadline is not None and deadline < now and not pending.future.done():
                pending.future.set_exception(
                    QueueTimeout.of(
                        self._model, now - pending.arrived, retry_after(self._max_wait or 0.0)
                    )
                )
                late = True
        if late:
            batch[:] = [p for p in batch if not p.future.done()]

    async def _run_batch(self, batch: list[Pending]) -> None:
        try:
            slot = await self._acquire()
        finally:
            if self._ahead is batch:
                self._ahead = []
            self._slotted.set()
        if self._timed:  # the batch formed ahead may have waited too long
            self._refuse_late(batch)
        # requests that arrived while it waited join it; those that left are dropped
        before = len(batch)
        if before < self._size:
            self._take(batch)
            task = asyncio.current_task()
            assert task is not None
            _join(task, batch[before:])
        batch[:] = [p for p in batch if not p.future.done()]
        if not batch:
            self._release(slot)
            return
        placed = self._placed
        if placed is not None and placed(slot):
            self._waiting_in.append((slot, batch, len(batch)))
            self._placed_n += len(batch)
        try:
            await self._run_placed(slot, batch)
        finally:
            if self._waiting_in:
                self._started_behind(slot, batch)

    def _started_behind(self, slot: Any, batch: list[Pending]) -> None:
        """``batch`` has ended on ``slot``: if it was still queued there, it never started and
        waits no more; else the oldest batch queued behind it there has taken its place."""
        waiting_in = self._waiting_in
        at = next((i for i, entry in enumerate(waiting_in) if entry[1] is batch), None)
        if at is None:
            at = next((i for i, entry in enumerate(waiting_in) if entry[0] is slot), None)
        if at is not None:
            self._placed_n -= waiting_in.pop(at)[2]

    async def _run_placed(self, slot: Any, batch: list[Pending]) -> None:
        self.batches_run += 1
        started = self._now()
        stats = self._stats
        if stats is not None:
            queue = stats.queue
            for p in batch:
                queue.add(int((started - p.arrived) * 1e9))
        try:
            hooks = tracing.hooks
            if hooks is None:
                outputs = await self._run(slot, batch)
            else:  # the batch's span, linked to each request's (and theirs to it)
                with hooks.batch([p.trace for p in batch]):
                    outputs = await self._run(slot, batch)
            check_results(outputs, len(batch), f"{self._label} predict")
        except self._retry_on:
            # never reached the slot: back to the front of the line, in order
            self.batches_run -= 1
            self._queue.extendleft(reversed(batch))
            self._arrived.set()
            return
        except Exception as exc:
            # The futures get what it raised; its traceback must not hold this frame, which
            # holds them (a cycle that would wait for a garbage collection).
            if exc.__traceback__ is not None:
                exc.__traceback__ = exc.__traceback__.tb_next
            _fail(batch, lambda _, exc=exc: exc)  # type: ignore[misc]
            return
        for p, out in zip(batch, outputs, strict=True):
            if not p.future.done():
                p.slot = slot
                p.future.set_result(out)
