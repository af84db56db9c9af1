"""Thread workers: one instance in the server process (:class:`ThreadWorker`).

The scheduler runs ``preprocess`` / ``postprocess`` outside the worker's slots; the worker runs
``predict``. A sync ``predict`` runs on the instance's own threads (its ``calls``), where the
worker may queue requests ahead of its slots (:func:`worker_ahead`). ``response_timeout`` is
kept by one path for every predict (:meth:`ThreadWorker.infer`): the caller waits in its own
task, and the worker's one sweep finds the calls past their deadline.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

from ..devices import CPU, set_device, using
from ..errors import DeviceLost, DeviceOutOfMemory, ResponseTimeout, Unavailable
from ..types import END, ModelInstance
from ._gate import WorkerGate
from ._stats import VersionStats
from ._worker import STUCK_GRACE, Failure, Moved, WorkerKind, WorkerState, queue_ahead

__all__ = ["ThreadWorker", "worker_ahead"]

_now = time.perf_counter_ns


class ThreadWorker:
    """One instance in the server process, with ``capacity`` slots: predict_concurrency, and
    ``ahead`` more for requests queued ahead of the predict threads (:func:`worker_ahead`).

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
        on_device_error: Callable[[ThreadWorker, BaseException], None] | None = None,
        stats: VersionStats | None = None,
        devices: tuple[int, ...] = (),
        device: str = CPU,
    ) -> None:
        self.id = wid
        #: the GPUs it holds (none: the CPU) and their name for the model (``podium.device()``,
        #: set around each predict: the threads that run a sync one copy the caller's context)
        self.devices = devices
        self.device = device
        self._on_device_error = on_device_error
        if devices:
            self.infer = self._on_device  # type: ignore[method-assign]
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
        #: what it ran on its GPU (the statistics extension's device_stats); None on the CPU
        self._on_gpu = self._stats.on_device(device) if devices else None
        self._producers: dict[asyncio.Task[None], asyncio.Queue[Any]] = {}
        # response_timeout (:meth:`infer`): the callers' tasks the sweep watches, each with
        # since when its predict runs (``perf_counter_ns``; None: a sync call's start, asked of
        # ``calls``); those it stopped, with the error their caller raises; those past their
        # deadline that still run, since when; those whose slot the call's real end frees (a
        # detached sync call)
        self._calls = instance.calls
        self._waiting: dict[asyncio.Task[Any], int | None] = {}
        self._stopped: dict[asyncio.Task[Any], Exception] = {}
        self._late: dict[asyncio.Task[Any], float] = {}
        self._held: set[asyncio.Task[Any]] = set()
        self._sweeper: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the one it serves, as last seen
        # (No more attributes here without taking one away: it has 29, and at 30 Python 3.11
        # stops sharing the instances' attribute names, which makes every attribute read on the
        # path slower. The sweep's period is worked out when it is set, not kept.)

    async def start(self) -> None:
        if not self._loaded:
            async with _load_lock():
                await self.instance.load()
            self._loaded = True
        self.state = WorkerState.READY

    async def infer(self, inputs: Any, request: Any, size: int = 1) -> Any:
        """``predict`` on ``inputs`` (``size`` requests: a batch's length), bounded by
        response_timeout when the model has one.

        The bound counts from when predict starts: at once for an async one, when its call
        starts in a thread for a sync one (a request queued ahead waits behind the calls before
        it without its clock running). It is kept in the caller's own task, with no task,
        future or timer of its own (and in this one coroutine, no inner one: a level of await
        costs every request a frame): one sweep per worker, every quarter of the timeout (at
        most 1 s), finds the calls past their deadline (:meth:`_sweep`), so a predict is
        stopped between ``response_timeout`` and a quarter more after it started.

        Past it the caller fails at once with ``ResponseTimeout``. An async predict is
        cancelled, and its end frees the slot. A thread cannot be stopped: a sync call runs on,
        holding its slot until it returns (so predict_concurrency stays a true bound), and one
        still running STUCK_GRACE later gets this worker replaced
        (:meth:`WorkerPool._replace_stuck`)."""
        start = _now()
        if not self._timeout:
            try:
                outputs = await self.instance.predict(inputs, request)
            finally:
                self._gate.release(self)
            self._stats.executed(size, _now() - start)
            return outputs
        # The caller's task, asked of the loop this worker last ran on: with no loop given,
        # ``current_task`` (and ``get_running_loop``) ask the OS for the pid on every call on
        # Python 3.11. A worker serves one loop (its gate's futures belong to it); another one
        # (a test's next loop) has no current task on the old one, and is looked up then, and
        # a sweep set on the old loop will never run: the next call sets one on this loop.
        loop = self._loop
        if loop is None or (task := asyncio.current_task(loop)) is None:
            self._loop = loop = asyncio.get_running_loop()
            self._sweeper = None
            task = asyncio.current_task(loop)
            assert task is not None
        # since when it runs: an async predict's start (``start``); a sync one's, once a thread
        # takes it, is asked of ``calls`` (None here)
        self._waiting[task] = None if self._calls is not None else start
        if self._sweeper is None:
            self._sweeper = loop.call_later(_tick(self._timeout), self._sweep)
        try:
            outputs = await self.instance.predict(inputs, request)
        except asyncio.CancelledError:
            stopped = self._stopped.pop(task, None)
            if stopped is not None and task.uncancel() == 0:  # not the client leaving as well
                raise stopped from None
            raise
        finally:
            self._waiting.pop(task, None)
            # what the sweep keeps is rare: a dictionary looked at only when it holds anything
            if self._stopped:
                self._stopped.pop(task, None)
            if task in self._held:  # its call runs on: its end frees the slot (_late_ended)
                self._held.discard(task)
            else:
                if self._late:  # (an async predict that swallowed its cancellation)
                    self._late.pop(task, None)
                self._gate.release(self)
        self._stats.executed(size, _now() - start)
        return outputs

    async def _on_device(self, inputs: Any, request: Any, size: int = 1) -> Any:
        """:meth:`infer` on a GPU (it stands for it there: the CPU's path pays nothing):
        ``podium.device()`` is this worker's, and a device's failure is told to the pool (out
        of memory: counted; lost: this worker is replaced)."""
        start = _now()
        try:
            with using(self.device):
                outputs = await ThreadWorker.infer(self, inputs, request, size)
        except (DeviceOutOfMemory, DeviceLost) as exc:
            if self._on_device_error is not None:
                self._on_device_error(self, exc)
            raise
        assert self._on_gpu is not None  # (this path stands for infer on a GPU only)
        self._on_gpu.executed(size, _now() - start)
        return outputs

    async def batch(self, inputs: list[Any], requests: list[Any]) -> Any:
        return await self.infer(inputs, requests, len(inputs))

    def _sweep(self) -> None:
        """The predicts of :meth:`infer` past response_timeout: each caller fails at once. When
        every predict thread is held by a sync call so, the requests queued ahead that have not
        started are taken back (``Moved``: the next worker takes them) and the worker takes no
        more ahead of its threads until one returns."""
        loop = asyncio.get_running_loop()
        calls = self._calls
        now = time.monotonic()
        # an async predict's start is its ``perf_counter_ns`` (:meth:`infer`'s ``start``), a
        # sync call's start in a thread ``calls``' monotonic time: each is compared on its clock
        deadline_ns = _now() - int(self._timeout * 1e9)
        for task, since in list(self._waiting.items()):
            if since is not None:
                if since > deadline_ns:
                    continue
            elif calls is None or (started := calls.started(task)) is None:
                continue
            elif started + self._timeout > now:
                continue
            del self._waiting[task]
            self._late[task] = now
            if calls is not None and calls.detach(task, functools.partial(self._late_ended, task)):
                self._held.add(task)
                if self._on_stuck is not None:
                    loop.call_later(STUCK_GRACE, self._check_stuck, task)
            self._stopped[task] = ResponseTimeout(
                f"{self._label} predict did not finish within response_timeout "
                f"{self._timeout:g} s (thread worker {self.id})"
            )
            task.cancel()
        if calls is not None and len(self._late) >= self.slots and self.capacity > self.slots:
            self.capacity = self.slots
            for task in list(self._waiting):
                if calls.started(task) is None and calls.withdraw(task):
                    del self._waiting[task]
                    self._stopped[task] = Moved(
                        f"{self._label}: thread worker {self.id} has every predict thread held "
                        "by a call past response_timeout; the request goes to another worker"
                    )
                    task.cancel()
        self._sweeper = (
            loop.call_later(_tick(self._timeout), self._sweep) if self._waiting else None
        )

    def _late_ended(self, task: asyncio.Task[Any]) -> None:
        """A detached call (:meth:`_sweep`) has returned: its slot is free."""
        self._late.pop(task, None)
        if not self._late:
            self.capacity = self._full
        self._gate.release(self)

    def stuck(self) -> int:
        """Calls this worker still runs more than STUCK_GRACE seconds past their
        response_timeout (an async predict that ignores its cancellation, a sync one whose
        thread runs on)."""
        if not self._late:
            return 0
        limit = time.monotonic() - STUCK_GRACE
        return sum(1 for since in self._late.values() if since <= limit)

    def _check_stuck(self, task: asyncio.Task[Any]) -> None:
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
                self._gate.release(self)

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
        if self.devices:  # (this task's own context: set for its whole stream)
            set_device(self.device)
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
            if isinstance(exc, DeviceOutOfMemory | DeviceLost) and self._on_device_error:
                self._on_device_error(self, exc)
        finally:
            try:
                await items.aclose()
            finally:
                released[0] = True
                self._gate.release(
                    self
                )  # before the last put: a slow reader must not hold the slot
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


def _tick(response_timeout: float) -> float:
    """How often a worker's sweep looks for calls past ``response_timeout``: every quarter of
    it, at most every second."""
    return min(response_timeout / 4, 1.0)


#: Thread workers' instances load one at a time on each event loop (a server's): libraries'
#: lazy imports are not all thread-safe (two models that load transformers at once, in two
#: threads, fail with "cannot import name ..."), and loads in one process share its CPU and
#: GIL anyway. Process workers load in parallel, each in its own process.
_LOADS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
    weakref.WeakKeyDictionary()
)


def _load_lock() -> asyncio.Lock:
    loop = asyncio.get_running_loop()
    lock = _LOADS.get(loop)
    if lock is None:
        lock = _LOADS[loop] = asyncio.Lock()
    return lock


def worker_ahead(config: Any, instance: ModelInstance) -> int:
    """How many requests a thread worker takes queued ahead of its slots (:func:`queue_ahead`):
    only for a plain sync ``predict`` on the instance's own threads (``calls``), which it bounds
    to the slots so that predict_concurrency stays the bound of predicts at once, and whose
    calls it times from their start (response_timeout does not count a request's wait behind
    another). With dynamic batching, one batch per thread: the batches formed ahead are queued
    to the threads while the ones before run, so that a thread starts the next the moment its
    batch returns, not once the event loop has read its result and handed the slot on. Not with streaming or
    sequences (their schedulers count slots as turns)."""
    caps = instance.capabilities
    calls = instance.calls
    if calls is None or caps.streaming or caps.continuous or config.sequence_batching:
        return 0
    slots = config.predict_concurrency
    calls.limit = slots
    return queue_ahead(slots, config)
