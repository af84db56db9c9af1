"""Execution: the instances (workers) of one model version, in the server or in worker processes.

A :class:`WorkerPool` runs ``min_workers`` workers of one kind and puts them behind one
:class:`~podium.runtime._gate.WorkerGate` (the least-loaded ready worker gets the next request;
one bounded FIFO line for all). Schedulers take a slot from the gate and hand the request to
the worker they got; the worker gives the slot back when its instance is done with it.

- ``thread`` workers (:class:`ThreadWorker`): instances in the server process. The scheduler runs
  ``preprocess`` / ``postprocess`` outside the slots itself; the worker runs ``predict``.
- ``process`` workers (:class:`podium.runtime.process.ProcessWorker`): one instance per worker
  process, which runs the whole ``preprocess`` → ``predict`` → ``postprocess`` (that package
  builds on this module; this one does not import it).

The pool restarts workers that die (with a back-off), retires workers on ``scale`` once they have
finished what they hold, and replaces a worker whose predict ran past ``response_timeout``. It
says when that is not enough (:meth:`WorkerPool.trouble`): every worker stuck, or workers lost
again and again; the version is then reported not ready, with the reason.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import enum
import functools
import logging
import os
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol

from ..errors import InvalidInput, ModelNotReady, ResponseTimeout, Unavailable, WorkerDied
from ..metrics import recording_to
from ..types import END, ModelInstance
from ._gate import WorkerGate
from ._stats import RestartReason, VersionStats

__all__ = [
    "Failure",
    "Moved",
    "RequestCodec",
    "ThreadWorker",
    "Worker",
    "WorkerInfo",
    "WorkerKind",
    "WorkerPool",
    "WorkerState",
    "thread_pool",
]

logger = logging.getLogger("podium.workers")

_now = time.perf_counter_ns

#: Seconds a timed-out sync predict gets to return before its thread worker is replaced.
STUCK_GRACE = 1.0
#: Restart back-off: first delay, ceiling, and how many failed starts in a row fail the version.
BACKOFF_FIRST = 0.1
BACKOFF_MAX = 5.0
MAX_START_FAILURES = 5
#: A worker that lived at least this long before dying resets the back-off.
STABLE_AFTER = 10.0
#: Requests a thread worker of a sync ``predict`` takes beyond its slots (at least; as many as
#: its slots if more): they wait in the instance's own line for a predict thread, so that a
#: thread that finishes one finds the next already there, instead of sleeping until the event
#: loop has freed the slot and handed it on (bench/run.py, ``podium-sync``).
PREDICT_AHEAD = 4
#: Workers lost (died, killed past response_timeout, replaced when stuck) this many times within
#: RESTART_WINDOW seconds: the version is crash-looping (:meth:`WorkerPool.trouble`).
RESTART_LIMIT = 5
RESTART_WINDOW = 60.0


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


_LIVE = (WorkerState.STARTING, WorkerState.READY)


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """One worker as the management API shows it.

    ``pid`` is the process running the model's code: the worker process for ``process`` workers,
    the server's own pid for ``thread`` workers. ``busy`` counts the requests it holds.
    """

    id: str
    pid: int | None
    kind: WorkerKind
    state: WorkerState
    busy: int
    started: float  # epoch seconds


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

    async def start(self) -> None: ...

    async def infer(self, inputs: Any, request: Any) -> Any: ...

    def stream(self, inputs: Any, request: Any) -> AsyncGenerator[Any, None]: ...

    async def batch(self, inputs: list[Any], requests: list[Any]) -> Any: ...

    async def wait_idle(self) -> None: ...

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


class ThreadWorker:
    """One instance in the server process, with ``capacity`` slots: predict_concurrency, and
    ``ahead`` more for requests queued ahead of the predict threads (:func:`_ahead`).

    Each execution of ``predict`` (a request, a batch, a stream until its end) is counted in
    ``stats`` (:meth:`VersionStats.executed`) when it succeeds."""

    kind = WorkerKind.THREAD

    def __init__(
        self,
        wid: str,
        instance: ModelInstance,
        *,
        gate: WorkerGate,
        capacity: int,
        label: str,
        ahead: int = 0,
        response_timeout: float = 0.0,
        stream_buffer: int = 16,
        loaded: bool = False,
        on_stuck: Callable[[ThreadWorker], None] | None = None,
        stats: VersionStats | None = None,
    ) -> None:
        self.id = wid
        self.instance = instance
        self.pid: int | None = os.getpid()
        self.state = WorkerState.STARTING
        self.busy = 0
        self.capacity = capacity
        self._full = capacity
        self.slots = capacity - ahead  # predicts at once
        self.ahead = ahead  # places for requests queued ahead of the predict threads
        self.started = time.time()
        self._gate = gate
        self._label = label
        self._timeout = response_timeout
        self._buffer = stream_buffer
        self._loaded = loaded
        self._on_stuck = on_stuck
        self._stats = stats if stats is not None else VersionStats()
        self._producers: dict[asyncio.Task[None], asyncio.Queue[Any]] = {}
        self._idle: asyncio.Event | None = None
        # response_timeout of async predicts: each running one's deadline, swept periodically;
        # the expired ones (cancelled) until they return, with their deadline
        self._deadlines: dict[asyncio.Task[Any], float] = {}
        self._expired: dict[asyncio.Task[Any], float] = {}
        # sync predicts: each running one's deadline and its caller's waiter, swept likewise;
        # those past response_timeout, still running in their thread, since when
        self._threaded: dict[asyncio.Task[Any], tuple[float, asyncio.Future[Any]]] = {}
        self._late: dict[asyncio.Future[Any], float] = {}
        # sync predicts on the instance's own threads (``calls``, model/_threads.py), waited for
        # in their callers' tasks: those the sweep watches; those it stopped, with the error
        # their caller raises; those whose slot the call's real end frees (detached)
        self._calls: Any = getattr(instance, "calls", None)
        self._waiting: dict[asyncio.Task[Any], None] = {}
        self._stopped: dict[asyncio.Task[Any], Exception] = {}
        self._held: set[asyncio.Task[Any]] = set()
        self._sweeper: asyncio.TimerHandle | None = None
        self._tick = min(response_timeout / 4, 1.0) if response_timeout else 1.0

    async def start(self) -> None:
        if not self._loaded:
            await self.instance.load()
            self._loaded = True
        self.state = WorkerState.READY

    def _release(self) -> None:
        self._gate.release(self)
        if self.busy == 0 and self._idle is not None:
            self._idle.set()

    async def wait_idle(self) -> None:
        if self.busy:
            self._idle = asyncio.Event()
            await self._idle.wait()

    async def infer(self, inputs: Any, request: Any, size: int = 1) -> Any:
        """``predict`` on ``inputs`` (``size`` requests: a batch's length)."""
        start = _now()
        if not self._timeout:
            try:
                outputs = await self.instance.predict(inputs, request)
            finally:
                self._release()
        elif self.instance.capabilities.predict_in_thread:
            if self._calls is not None:
                outputs = await self._timed_calls(inputs, request)
            else:
                outputs = await self._timed(inputs, request)
        else:
            outputs = await self._timed_inline(inputs, request)
        self._stats.executed(size, _now() - start)
        return outputs

    async def _timed_inline(self, inputs: Any, request: Any) -> Any:
        """An async predict bounded by response_timeout, in the caller's own task: past the
        timeout it is cancelled, which frees the slot at once, and the request fails with
        ``ResponseTimeout``. No task or timer of its own per call: one sweep per worker checks
        the deadlines every quarter of the timeout (at most 1 s), so a predict is stopped
        between ``response_timeout`` and a quarter more after it started."""
        loop = asyncio.get_running_loop()
        task = asyncio.current_task(loop)
        assert task is not None
        self._deadlines[task] = loop.time() + self._timeout
        if self._sweeper is None:
            self._sweeper = loop.call_later(self._tick, self._sweep)
        try:
            return await self.instance.predict(inputs, request)
        except asyncio.CancelledError:
            if self._expired.pop(task, None) is not None:
                if task.uncancel() == 0:  # ours alone, not the client leaving as well
                    raise ResponseTimeout(
                        f"{self._label} predict did not finish within response_timeout "
                        f"{self._timeout:g} s (thread worker {self.id})"
                    ) from None
            raise
        finally:
            self._deadlines.pop(task, None)
            self._expired.pop(task, None)  # a predict that swallowed its cancellation
            self._release()

    def _sweep(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        for task, deadline in list(self._deadlines.items()):
            if deadline <= now:
                del self._deadlines[task]
                self._expired[task] = deadline
                task.cancel()
        for task, (deadline, waiter) in list(self._threaded.items()):
            if deadline <= now:
                del self._threaded[task]
                self._timed_out(task, waiter, now)
        if self._waiting:
            self._sweep_calls(now)
        self._sweeper = (
            loop.call_later(self._tick, self._sweep)
            if self._deadlines or self._threaded or self._waiting
            else None
        )

    async def _timed_calls(self, inputs: Any, request: Any) -> Any:
        """A sync predict on the instance's own threads (``calls``), bounded by
        response_timeout counted from when its call starts in a thread: a request queued
        ahead (:func:`_ahead`) waits behind the calls before it without its clock running.
        Waited for in the caller's own task, with no task, future or timer of its own: the
        worker's one sweep finds the calls past their deadline (:meth:`_sweep_calls`)."""
        loop = asyncio.get_running_loop()
        task = asyncio.current_task(loop)
        assert task is not None
        self._waiting[task] = None
        if self._sweeper is None:
            self._sweeper = loop.call_later(self._tick, self._sweep)
        try:
            return await self.instance.predict(inputs, request)
        except asyncio.CancelledError:
            stopped = self._stopped.pop(task, None)
            if stopped is not None and task.uncancel() == 0:  # not the client leaving as well
                raise stopped from None
            raise
        finally:
            self._waiting.pop(task, None)
            self._stopped.pop(task, None)
            if task in self._held:  # its call runs on: its end frees the slot (_late_ended)
                self._held.discard(task)
            else:
                self._release()

    def _sweep_calls(self, now: float) -> None:
        """The calls of :meth:`_timed_calls` past response_timeout: each caller fails at once
        with ``ResponseTimeout``; a thread cannot be stopped, so the call runs on, holding its
        slot until it returns, and a call still running after STUCK_GRACE gets this worker
        replaced (as :meth:`_timed`). When every predict thread is held so, the requests
        queued ahead that have not started are taken back (``Moved``: the next worker takes
        them) and the worker takes no more ahead of its threads."""
        calls = self._calls
        clock = time.monotonic()
        for task in list(self._waiting):
            since = calls.started(task)
            if since is None or since + self._timeout > clock:
                continue
            del self._waiting[task]
            if calls.detach(task, functools.partial(self._late_ended, task)):
                self._held.add(task)
                self._late[task] = now
                if self._on_stuck is not None:
                    asyncio.get_running_loop().call_later(STUCK_GRACE, self._check_stuck, task)
            self._stopped[task] = ResponseTimeout(
                f"{self._label} predict did not finish within response_timeout "
                f"{self._timeout:g} s (thread worker {self.id})"
            )
            task.cancel()
        if len(self._late) < self.slots or self.capacity == self.slots:
            return
        self.capacity = self.slots
        for task in list(self._waiting):
            if calls.started(task) is None and calls.withdraw(task):
                del self._waiting[task]
                self._stopped[task] = Moved(
                    f"{self._label}: thread worker {self.id} has every predict thread held by "
                    "a call past response_timeout; the request goes to another worker"
                )
                task.cancel()

    def _late_ended(self, task: asyncio.Task[Any]) -> None:
        """A detached call (:meth:`_sweep_calls`) has returned: its slot is free."""
        self._late.pop(task, None)
        if not self._late:
            self.capacity = self._full
        self._release()

    async def batch(self, inputs: list[Any], requests: list[Any]) -> Any:
        return await self.infer(inputs, requests, len(inputs))

    async def _timed(self, inputs: Any, request: Any) -> Any:
        """A sync predict bounded by response_timeout. A thread cannot be killed: past the
        timeout the request fails at once, the slot stays taken until the call really returns
        (so predict_concurrency stays a true bound), and a call still running after STUCK_GRACE
        gets this worker replaced (:meth:`WorkerPool._replace_stuck`). The predict runs in a
        task of its own, which holds the slot; the caller waits on a future that the task's end
        or the deadline settles. No timer per call: the worker's one sweep (see
        :meth:`_timed_inline`) finds the calls past their deadline."""
        loop = asyncio.get_running_loop()
        task = loop.create_task(self.instance.predict(inputs, request))
        waiter = loop.create_future()
        self._threaded[task] = (loop.time() + self._timeout, waiter)
        task.add_done_callback(self._threaded_done)
        if self._sweeper is None:
            self._sweeper = loop.call_later(self._tick, self._sweep)
        try:
            return await waiter
        except asyncio.CancelledError:
            if not waiter.done() or waiter.cancelled():  # the caller left: so does the call
                task.cancel()
            raise

    def _threaded_done(self, task: asyncio.Task[Any]) -> None:
        self._release()
        self._late.pop(task, None)
        entry = self._threaded.pop(task, None)
        if entry is None or entry[1].done():  # timed out already, or the caller left
            if not task.cancelled():
                task.exception()  # nobody reads it: no "never retrieved" noise
            return
        waiter = entry[1]
        if task.cancelled():
            waiter.cancel()
        elif (exc := task.exception()) is not None:
            waiter.set_exception(exc)
        else:
            waiter.set_result(task.result())

    def _timed_out(self, task: asyncio.Task[Any], waiter: asyncio.Future[Any], now: float) -> None:
        """A sync predict ran past response_timeout: its caller fails at once; the call runs on
        in its thread, holding its slot, and counts as late until it returns."""
        if not waiter.done():
            waiter.set_exception(
                ResponseTimeout(
                    f"{self._label} predict did not finish within response_timeout "
                    f"{self._timeout:g} s (thread worker {self.id})"
                )
            )
        task.cancel()
        if not task.done():  # a thread cannot be stopped: it runs on, holding its slot
            self._late[task] = now
        if self._on_stuck is not None:
            asyncio.get_running_loop().call_later(STUCK_GRACE, self._check_stuck, task)

    def stuck(self) -> int:
        """Calls this worker still runs more than STUCK_GRACE seconds past their
        response_timeout (an async predict that ignores its cancellation, a sync one whose
        thread runs on)."""
        if not self._expired and not self._late:
            return 0
        limit = asyncio.get_running_loop().time() - STUCK_GRACE
        late = [*self._expired.values(), *self._late.values()]
        return sum(1 for deadline in late if deadline <= limit)

    def _check_stuck(self, task: asyncio.Future[Any]) -> None:
        if task in self._late and self.state is WorkerState.READY and self._on_stuck is not None:
            self._on_stuck(self)

    def stream(self, inputs: Any, request: Any) -> AsyncGenerator[Any, None]:
        """The items of a streaming predict, through a bounded buffer of ``stream_buffer``."""
        return self._stream(lambda: self.instance.predict_stream(inputs, request))

    def stream_inputs(self, inputs: AsyncIterator[Any], request: Any) -> AsyncGenerator[Any, None]:
        """The answers of a model that reads a stream of requests (``predict_input_stream``),
        through the same bounded buffer; the slot is held until its stream ends."""
        return self._stream(lambda: self.instance.predict_input_stream(inputs, request))

    async def _stream(
        self, make: Callable[[], AsyncGenerator[Any, None]]
    ) -> AsyncGenerator[Any, None]:
        queue: asyncio.Queue[Any] = asyncio.Queue(self._buffer)
        released = [False]
        task = asyncio.get_running_loop().create_task(self._produce(make, queue, released))
        self._producers[task] = queue

        def done(task: asyncio.Task[None]) -> None:
            self._producers.pop(task, None)
            if not released[0]:  # cancelled before it ran, or predict_stream() itself raised
                released[0] = True
                self._release()

        task.add_done_callback(done)
        timeout = self._timeout or None
        try:
            while True:
                if queue.empty() and task.done():
                    task.result()  # its error, if it failed before producing anything
                    raise Unavailable(f"{self._label} stream ended without an answer")
                try:
                    async with asyncio.timeout(timeout):
                        item = await queue.get()
                except TimeoutError:
                    raise ResponseTimeout(
                        f"{self._label} predict produced no item within response_timeout "
                        f"{self._timeout:g} s (thread worker {self.id})"
                    ) from None
                if item is END:
                    return
                if isinstance(item, Failure):
                    item.raise_once()
                yield item
        finally:
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    async def _produce(
        self,
        make: Callable[[], AsyncGenerator[Any, None]],
        queue: asyncio.Queue[Any],
        released: list[bool],
    ) -> None:
        outcome: Any = END
        start = _now()
        try:
            items = make()
        except Exception as exc:
            await queue.put(Failure(exc))
            return
        try:
            async for item in items:
                await queue.put(item)
            self._stats.executed(1, _now() - start)
        except Exception as exc:
            outcome = Failure(exc)
        finally:
            try:
                await items.aclose()
            finally:
                released[0] = True
                self._release()  # before the last put: a slow reader must not hold the slot
        await queue.put(outcome)
        del outcome  # (an error's traceback holds this frame: no cycle through it)

    async def close(self) -> None:
        """Stop every running stream; their readers get ``Unavailable``, not a hang."""
        self.state = WorkerState.DEAD
        producers = dict(self._producers)
        for task in producers:
            task.cancel()
        if producers:
            await asyncio.gather(*producers, return_exceptions=True)
        for queue in producers.values():
            failure = Failure(Unavailable(f"{self._label} was unloaded mid-stream"))  # (one each)
            while True:  # the reader must see the failure even if the buffer is full
                try:
                    queue.put_nowait(failure)
                    break
                except asyncio.QueueFull:
                    queue.get_nowait()
        # The model's own unload hook, where its contract has one (an MLServer runtime's
        # unload()); errors are the adapter's to log.
        close = getattr(self.instance, "close", None)
        if close is not None:
            await close()


WorkerFactory = Callable[[str], Awaitable[Worker]]


class WorkerPool:
    """The workers of one model version: started, restarted, scaled and stopped here.

    ``new_worker(id)`` makes a worker that has not started yet; ``instance`` is the version's
    descriptor (what the front ends read: its ``capabilities``) and, for thread
    workers, the instance ``preprocess`` runs on.
    """

    def __init__(
        self,
        *,
        model: str,
        label: str,
        kind: WorkerKind,
        instance: ModelInstance,
        new_worker: WorkerFactory,
        min_workers: int,
        max_workers: int,
        max_waiting: int,
        slots_per_worker: int = 1,
        stats: VersionStats | None = None,
    ) -> None:
        self.model = model
        #: the version's counters (what its workers and schedulers record; metrics read them)
        self.stats = stats if stats is not None else VersionStats()
        self.slots_per_worker = slots_per_worker
        self.label = label
        self.kind = kind
        self.instance = instance
        self.gate = WorkerGate(model, max_waiting)
        self.min_workers = min_workers
        self.max_workers = max(max_workers, min_workers, 1)
        self._new_worker = new_worker
        self._workers: list[Worker] = []
        self._count = 0
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._failures = 0  # deaths and failed starts in a row: the back-off
        self._start_failures = 0  # failed starts in a row: giving up
        # workers lost lately (monotonic time, what happened), for trouble()
        self._losses: collections.deque[tuple[float, str]] = collections.deque(maxlen=RESTART_LIMIT)
        self._closing = False
        self._started = False
        #: called with the reason when workers cannot be (re)started: the version has failed
        self.on_failed: Callable[[str], None] | None = None
        #: called when a worker leaves for good (it died, was replaced when stuck, or retired),
        #: with what happened ("died", ...): a scheduler that pins work to a worker (stateful
        #: sequences) closes what it held there
        self.on_worker_lost: Callable[[Worker, str], None] | None = None

    @classmethod
    def single(
        cls,
        instance: ModelInstance,
        *,
        model: str,
        concurrency: int,
        max_waiting: int,
        stream_buffer: int = 16,
    ) -> WorkerPool:
        """One thread worker over an instance that is already loaded (schedulers built directly,
        and the scheduler inside a worker process)."""
        pool = cls(
            model=model,
            label=f"model '{model}'",
            kind=WorkerKind.THREAD,
            instance=instance,
            new_worker=_no_more_workers,
            min_workers=1,
            max_workers=1,
            max_waiting=max_waiting,
        )
        worker = ThreadWorker(
            "1",
            instance,
            gate=pool.gate,
            capacity=concurrency,
            label=pool.label,
            stream_buffer=stream_buffer,
            loaded=True,
            stats=pool.stats,
        )
        worker.state = WorkerState.READY
        pool._workers.append(worker)
        pool._count = 1
        pool._started = True
        pool.gate.add(worker)
        return pool

    @classmethod
    def for_config(
        cls,
        config: Any,
        kind: WorkerKind,
        instance: Any,
        new_worker: WorkerFactory,
        stats: VersionStats | None = None,
    ) -> WorkerPool:
        """The pool a model's config asks for: its workers, slots and waiting line."""
        label = f"model '{config.name}'" + (
            f" version '{config.version}'" if config.version else ""
        )
        return cls(
            model=config.name,
            label=label,
            kind=kind,
            instance=instance,
            new_worker=new_worker,
            min_workers=config.min_workers,
            max_workers=config.max_workers,
            max_waiting=config.max_queue_size,
            slots_per_worker=config.predict_concurrency,
            stats=stats,
        )

    # -- views -----------------------------------------------------------------------------

    def infos(self) -> list[WorkerInfo]:
        return [WorkerInfo(w.id, w.pid, w.kind, w.state, w.busy, w.started) for w in self._workers]

    def statistics(self) -> dict[str, int]:
        """Slots of the ready workers, requests held by any worker, requests in the line."""
        if not self._started:  # not loaded yet: the slots it will have
            slots = self.min_workers * self.slots_per_worker
        else:
            slots = sum(w.capacity for w in self._workers if w.state is WorkerState.READY)
        return {
            "slots": slots,
            "busy": sum(w.busy for w in self._workers),
            "waiting": self.gate.waiting,
        }

    def counts(self) -> dict[str, int]:
        """Workers running (starting or ready) and ready."""
        live = self._live()
        ready = sum(w.state is WorkerState.READY for w in live)
        return {"workers": len(live), "ready_workers": ready}

    def trouble(self) -> str:
        """Why the workers do not serve well, or ``""``: workers lost RESTART_LIMIT times within
        RESTART_WINDOW seconds (crash-looping; it clears once the window holds fewer), or every
        ready worker with all its slots held by calls stuck past ``response_timeout``."""
        losses = self._losses
        if len(losses) >= RESTART_LIMIT:
            since = time.monotonic() - RESTART_WINDOW
            recent = [what for when, what in losses if when >= since]
            if len(recent) >= RESTART_LIMIT:
                return (
                    f"crash-looping: {len(recent)} workers lost in the last "
                    f"{RESTART_WINDOW:g} s (the last: {recent[-1]})"
                )
        ready = [w for w in self._workers if w.state is WorkerState.READY]
        if not ready:
            return ""
        stuck = [w.stuck() for w in ready]
        if all(n >= w.capacity for n, w in zip(stuck, ready, strict=True)):
            return (
                f"every worker is stuck: {sum(stuck)} call(s) still running more than "
                f"{STUCK_GRACE:g} s past response_timeout"
            )
        return ""

    def _note_loss(self, what: str) -> None:
        self._losses.append((time.monotonic(), what))

    def preprocessor(self) -> ModelInstance:
        """The instance a thread version's ``preprocess`` runs on: the least-loaded ready one."""
        best = None
        for w in self.gate.workers:
            if best is None or w.busy < best.busy:
                best = w
        return self.instance if best is None else best.instance

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Start ``min_workers`` workers and return once they are ready; raises what made the
        first one fail (the version is then FAILED). ``min_workers`` 0 starts none."""
        async with self._lock:
            self._closing = False
            self._failures = self._start_failures = 0
            missing = self.min_workers - len(self._live())
            if missing > 0:
                await asyncio.gather(*(self._start_one() for _ in range(missing)))
            self._started = True

    def _live(self) -> list[Worker]:
        return [w for w in self._workers if w.state in _LIVE]

    async def _start_one(self) -> Worker:
        self._count += 1
        # What the model's code creates while it is built and loaded records to this version.
        with recording_to(self.stats.custom):
            worker = await self._new_worker(str(self._count))
        self._workers.append(worker)
        self.gate.starting += 1
        try:
            with recording_to(self.stats.custom):
                await worker.start()
        except BaseException:
            worker.state = WorkerState.DEAD
            self._workers.remove(worker)
            raise
        finally:
            self.gate.starting -= 1
        if self._closing:
            await worker.close()
            raise Unavailable(f"{self.label} is stopping")
        self.gate.add(worker)
        logger.info(
            "%s: %s worker %s is ready (pid %s)", self.label, self.kind, worker.id, worker.pid
        )
        return worker

    async def scale(self, min_workers: int, max_workers: int | None = None) -> None:
        """Run ``min_workers`` workers (``max_workers``: the ceiling, default unchanged or min).

        Returns once the version runs that many: new workers are ready, removed workers have
        finished what they held (they take no new work from the moment they are chosen).
        """
        if max_workers is None:
            max_workers = max(self.max_workers, min_workers, 1)
        for name, value in (("min_worker", min_workers), ("max_worker", max_workers)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidInput(f"{self.label}: {name} must be an integer >= 0, got {value!r}")
        if max_workers < 1 or min_workers > max_workers:
            raise InvalidInput(
                f"{self.label}: need 0 <= min_worker <= max_worker and max_worker >= 1, got "
                f"min_worker {min_workers}, max_worker {max_workers}"
            )
        async with self._lock:
            self.min_workers, self.max_workers = min_workers, max_workers
            live = self._live()
            if len(live) < min_workers:
                await asyncio.gather(*(self._start_one() for _ in range(min_workers - len(live))))
            elif len(live) > min_workers:
                # the least busy go first; newest first among equals
                victims = sorted(live, key=lambda w: (w.busy, -int(w.id)))[
                    : len(live) - min_workers
                ]
                await asyncio.gather(*(self._retire(w) for w in victims))

    def _report_lost(self, worker: Worker, how: str) -> None:
        if self.on_worker_lost is not None:
            self.on_worker_lost(worker, how)

    async def _retire(self, worker: Worker, how: str = "was stopped (scaled down)") -> None:
        worker.state = WorkerState.STOPPING
        self.gate.remove(worker)
        if how:
            self._report_lost(worker, how)
        await worker.wait_idle()
        await worker.close()
        worker.state = WorkerState.DEAD
        if worker in self._workers:
            self._workers.remove(worker)
        logger.info("%s: %s worker %s stopped", self.label, self.kind, worker.id)

    def worker_exited(self, worker: Worker, reason: str, *, crashed: bool, lived: float) -> None:
        """A worker died (crash, kill, timeout recycling): replace it unless we are closing."""
        self.gate.remove(worker)
        worker.state = WorkerState.DEAD
        if worker in self._workers:
            self._workers.remove(worker)
        if self._closing:
            return
        self._report_lost(worker, "died")
        self._note_loss(reason)
        if crashed:
            logger.error("%s: %s", self.label, reason)
            self._failures = 0 if lived >= STABLE_AFTER else self._failures + 1
        self.stats.restarted(RestartReason.CRASHED if crashed else RestartReason.RESPONSE_TIMEOUT)
        self._spawn_replace()

    def _replace_stuck(self, worker: ThreadWorker) -> None:
        """A thread worker's predict outlived its timeout: it takes no new work, a fresh instance
        replaces it, and it is dropped once the stuck call returns."""
        logger.warning(
            "%s: thread worker %s is stuck past response_timeout; replacing it",
            self.label,
            worker.id,
        )
        worker.state = WorkerState.STOPPING
        self.gate.remove(worker)
        self._report_lost(worker, "died (stuck past response_timeout, replaced)")
        self._note_loss(f"thread worker {worker.id} stuck past response_timeout, replaced")
        self.stats.restarted(RestartReason.RESPONSE_TIMEOUT)
        self._spawn_replace()
        self._spawn(self._retire(worker, how=""))

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _spawn_replace(self) -> None:
        # Counted as starting from now on: requests arriving before the replacement task runs
        # wait for it instead of being told there are no workers.
        self.gate.starting += 1
        self._spawn(self._replace())

    async def _replace(self) -> None:
        try:
            await self._restore()
        finally:
            self.gate.starting -= 1

    async def _restore(self) -> None:
        """Bring the pool back to min_workers, backing off on repeated failures."""
        while not self._closing and len(self._live()) < self.min_workers:
            if self._failures:
                delay = min(BACKOFF_FIRST * 2 ** (self._failures - 1), BACKOFF_MAX)
                self.gate.starting += 1  # requests keep waiting for the worker to come
                try:
                    await asyncio.sleep(delay)
                finally:
                    self.gate.starting -= 1
                if self._closing:
                    return
            try:
                async with self._lock:
                    if len(self._live()) >= self.min_workers:
                        return
                    await self._start_one()
                    self._start_failures = 0
            except Exception as exc:
                self._failures += 1
                self._start_failures += 1
                tries = self._start_failures
                reason = f"restarting a {self.kind} worker failed: {exc}"
                logger.error("%s: %s (attempt %d)", self.label, reason, tries)
                if tries >= MAX_START_FAILURES:
                    reason = f"{reason}; gave up after {tries} attempts in a row"
                    self.gate.fail_waiters(ModelNotReady(f"{self.label} is not ready: {reason}"))
                    if self.on_failed is not None:
                        self.on_failed(reason)
                    return

    async def close(self) -> None:
        """Stop every worker (worker processes: asked to exit, killed after a bound)."""
        self._closing = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.gate.fail_waiters(Unavailable(f"{self.label} is stopped"))
        workers, self._workers = list(self._workers), []
        for worker in workers:
            self.gate.remove(worker)
        with contextlib.suppress(Exception):
            await asyncio.gather(*(w.close() for w in workers), return_exceptions=True)


async def _no_more_workers(wid: str) -> Worker:
    raise Unavailable("this pool runs one given instance and cannot start more workers")


def thread_pool(
    source: Any,
    instance: ModelInstance,
    *,
    build: Callable[[], ModelInstance],
    executor: Any,
    stats: VersionStats | None = None,
) -> WorkerPool:
    """A pool of thread workers: ``instance`` (already built) is the first worker's; more are
    made with ``build`` (the model's ``__init__``) in ``executor``. ``stats``: the version's
    counters."""
    config = source.config
    spare = [instance]

    async def new_worker(wid: str) -> Worker:
        if spare:
            made = spare.pop()
        else:
            # in this task's context: the metrics its __init__ creates are the version's
            run = contextvars.copy_context().run
            made = await asyncio.get_running_loop().run_in_executor(executor, run, build)
        slots = config.predict_concurrency
        ahead = _ahead(config, made)
        return ThreadWorker(
            wid,
            made,
            gate=pool.gate,
            capacity=slots + ahead,
            ahead=ahead,
            label=pool.label,
            response_timeout=config.response_timeout_s,
            stream_buffer=config.stream_buffer,
            on_stuck=pool._replace_stuck,
            stats=pool.stats,
        )

    pool = WorkerPool.for_config(config, WorkerKind.THREAD, instance, new_worker, stats)
    return pool


def _ahead(config: Any, instance: ModelInstance) -> int:
    """How many requests a thread worker takes queued ahead (PREDICT_AHEAD) beyond its slots:
    only for a plain sync ``predict`` whose instance bounds its own predict threads to the
    slots (``pipeline``), so predict_concurrency stays the bound of predicts at once, and
    whose calls the worker can time from their start (``calls``: response_timeout does not
    count a request's wait behind another). Not with streaming, batching or sequences (their
    schedulers count slots as batches or turns)."""
    caps = instance.capabilities
    pipeline = getattr(instance, "pipeline", None)
    if (
        pipeline is None
        or getattr(instance, "calls", None) is None
        or not caps.predict_in_thread
        or caps.streaming
        or caps.continuous
        or config.batch_size > 1
        or config.sequence_batching
    ):
        return 0
    slots = config.predict_concurrency
    pipeline(slots)
    # requests ahead wait as those in the gate's line do, and count against max_queue_size
    return min(max(PREDICT_AHEAD, slots), config.max_queue_size)
