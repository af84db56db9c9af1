"""Process workers, the server's side: one worker process per instance, over a socket pair.

The worker process (``python -m podium.runtime.process``, started fresh: spawn, never fork, since
the server runs thread pools and gRPC threads) builds the model itself from its ``ModelSource``
and runs preprocess → predict → postprocess for each request (``_child``). The server reads the
worker's socket from the event loop (an ``asyncio.Protocol``: no polling) and writes one frame per
request (``_wire``; the messages are in ``_messages``).

Pipelining: where a request is all predict (:func:`~._messages.queues_ahead`), a worker holds
requests queued ahead of its ``predict_concurrency`` slots (``queue_ahead``, the rule thread
workers follow too; a batch per slot, with dynamic batching), so that the next request is already in the worker process when a
predict ends. Frames written in one turn of the event loop leave in one write, and the worker
answers likewise. The worker starts queued requests in the order they were sent, and only once
the answer of the one before has left; so the server knows which have not started: a deadline
(``response_timeout``) starts when a request's predict does, and when the process dies the
requests queued in it that had not started go to another worker (``WorkerGone``).

A worker process that dies fails the requests it was running at once with ``WorkerDied`` (naming
its pid and how it ended); the pool starts another. A predict past ``response_timeout`` fails with
``ResponseTimeout`` and the process is killed and replaced (the only way to stop a sync call).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import enum
import itertools
import logging
import os
import socket
import sys
import time
from collections.abc import AsyncGenerator, Coroutine, Mapping
from pathlib import Path
from typing import Any

from ... import tracing
from ...errors import InvalidInput, ModelError, ResponseTimeout, WorkerDied
from ...types import END, Generation, ModelInstance, request_id
from ..workers import (
    Failure,
    RequestCodec,
    WorkerKind,
    WorkerPool,
    WorkerState,
    queue_ahead,
)
from ._messages import (
    Answer,
    Batch,
    Cancel,
    Credit,
    End,
    Error,
    Infer,
    Init,
    Item,
    Message,
    Ready,
    Report,
    Results,
    StartFailed,
    Stepped,
    queues_ahead,
)
from ._remote import Connection, PendingCall, RemoteInstance, describe_exit
from ._steps import RemoteSteps
from ._wire import Ring

__all__ = ["ProcessWorker", "WorkerGone"]

logger = logging.getLogger("podium.workers")

#: The directory holding the ``podium`` package: the worker imports this very Podium.
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[3])

#: Seconds a worker process gets to exit after its socket is closed before it is killed.
STOP_TIMEOUT = 5.0

_READY = WorkerState.READY  # compared on every request


class _Ending(enum.Enum):
    """Why the server ends a worker process (None: it was not ended, it crashed)."""

    STOPPED = "stopped"  # closed: scaled down, unregistered, server stopping
    FAILED_TO_START = "failed to start"  # its model could not be built or loaded
    RECYCLED = "recycled"  # killed and replaced (a stuck predict): ``_why`` says why


class WorkerGone(WorkerDied):
    """The worker died before the request was sent to it: the request can go to another."""


class ProcessWorker:
    """One worker process holding one instance; ``capacity`` requests at a time.

    ``init`` is what its process builds (:class:`Init`); ``codec`` snapshots request objects
    for it. The slots and the line are ``pool``'s; ``descriptor`` is the version's
    :class:`RemoteInstance`, described by the first worker that starts.
    """

    kind = WorkerKind.PROCESS

    def __init__(
        self,
        wid: str,
        *,
        pool: WorkerPool,
        descriptor: RemoteInstance,
        init: Init,
        codec: RequestCodec | None,
        devices: tuple[int, ...] = (),
        device_env: Mapping[str, str] | None = None,
    ) -> None:
        config = init.source.config
        self.id = wid
        self.devices = devices  # the GPUs it holds (none: the CPU)
        self._device_env = device_env or {}  # CUDA_VISIBLE_DEVICES: its GPUs (docs/devices.md)
        self._on_device_error = pool.device_error
        self.instance: ModelInstance = descriptor
        self._descriptor = descriptor
        self.pid: int | None = None
        self.state = WorkerState.STARTING
        self.busy = 0
        self.capacity = config.predict_concurrency
        self.started = time.time()
        self._init = init
        self._codec = codec
        self._gate = pool.gate
        self._stats = pool.stats
        #: what it runs on its GPU (the statistics' device_stats); None on the CPU
        self._on_gpu = pool.stats.on_device(pool.devices.name(devices)) if devices else None
        self._label = pool.label
        self._model, self._version = config.name, config.version  # what its spans name
        self._on_exit = pool.worker_exited
        self._batching = config.batch_size > 1
        self._timeout = config.response_timeout_s
        self._tick = min(self._timeout / 4, 1.0) if self._timeout else 1.0
        self._sweeper: asyncio.TimerHandle | None = None
        self._window = config.stream_buffer
        self._calls: dict[int, PendingCall] = {}
        self._ids = itertools.count(1)
        self.slots = config.predict_concurrency  # predicts at once
        #: places for requests queued ahead in the worker process beyond its slots (set once it
        #: is ready; the gate counts them as waiting, against max_queue_size)
        self.ahead = 0
        self._max_ahead = queue_ahead(config.predict_concurrency, config)
        self._running = 0  # calls counted as started
        self._queued: collections.deque[int] = collections.deque()  # sent, not started, in order
        self._proc: asyncio.subprocess.Process | None = None
        self._connection: Connection | None = None
        self._ready: asyncio.Future[Ready] | None = None
        self._exited: asyncio.Future[None] | None = None
        self._ending: _Ending | None = None  # why we are ending it: not a crash
        self._why = ""  # what the logs and errors say of it
        self._was_ready = False
        self._holding = False  # counted in the gate's ``starting`` while it is being replaced
        self._steps = RemoteSteps()  # continuous batching: what its process holds (``step``)

    # -- starting and stopping -------------------------------------------------------------

    async def start(self) -> None:
        """Spawn the process and wait until it has built and loaded the model; raises
        ``WorkerDied`` with the reason when it cannot."""
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        source = self._init.source
        env = {**os.environ, **source.process_env, **self._device_env}
        if source.python is None:
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH", "")) if p
            )
        # else: the model's own environment, whose packages come first; the server's (Podium
        # included) follow through its .pth file (runtime/environments.py)
        try:
            self._proc = await asyncio.create_subprocess_exec(
                str(source.python or sys.executable),
                "-m",
                "podium.runtime.process",  # this package's __main__: _child.main
                str(theirs.fileno()),
                str(os.getpid()),
                pass_fds=(theirs.fileno(),),
                stdin=asyncio.subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # the server's process-group signals are not for it
            )
        finally:
            theirs.close()
        self.pid = self._proc.pid
        self._ready = loop.create_future()
        self._exited = loop.create_future()
        # large buffers to the worker go through a shared memory ring named after init.shm
        ring = Ring(f"{self._init.shm}-s") if self._init.shm else None
        connection = Connection(self._on_message, self._on_lost, ring)
        await loop.create_unix_connection(lambda: connection, sock=ours)
        self._connection = connection
        self._send(self._init)
        try:
            ready = await self._ready
        except BaseException:
            await self.close()
            raise
        try:
            self._descriptor.describe(ready)
        except ValueError as exc:
            await self.close()
            raise WorkerDied(f"{self._label} worker process {self.pid}: {exc}") from exc
        if queues_ahead(ready.capabilities):
            # the next request waits in the worker, not here: no round trip between two predicts
            self.ahead = self._max_ahead  # (a batch per slot, with dynamic batching)
            self.capacity = self.slots + self.ahead
        elif self._descriptor.pipelined and not self._batching:
            # predict_concurrency bounds predict inside the worker; as many requests again may be
            # in its preprocess/postprocess meanwhile (the rest wait here, where a crash loses none)
            self.capacity *= 2
        self.started = time.time()
        self.state = WorkerState.READY
        self._was_ready = True

    async def close(self) -> None:
        """Close its socket (the process exits on EOF); kill it after STOP_TIMEOUT."""
        if self._ending is None:
            self._ending, self._why = _Ending.STOPPED, _Ending.STOPPED.value
        if self.state is not WorkerState.DEAD:
            self.state = WorkerState.STOPPING
        connection = self._connection
        if connection is not None and connection.transport is not None:
            connection.out.flush()
            connection.transport.close()
        if self._exited is not None and not self._exited.done():  # (_reap waits, or kills it)
            await asyncio.shield(self._exited)
        self.state = WorkerState.DEAD

    def recycle(self, why: str) -> None:
        """Kill the process now (a stuck predict cannot be stopped otherwise); it is replaced."""
        if self._ending is None:
            self._ending, self._why = _Ending.RECYCLED, why
        self._hold_place()
        if self._proc is not None and self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()

    async def _exit(self) -> int | None:
        """Wait for the process to exit (its socket is closed), STOP_TIMEOUT at most, then kill
        it; its return code (None: it never started)."""
        proc = self._proc
        if proc is None:
            return None
        try:
            return await asyncio.wait_for(proc.wait(), STOP_TIMEOUT)
        except TimeoutError:  # closed its end but lives on: make sure it is gone
            logger.warning("%s: worker process %s did not exit; killing it", self._label, proc.pid)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            return await proc.wait()

    def stuck(self) -> int:
        """None: a predict past response_timeout gets its process killed (and counted as a
        worker lost, :meth:`WorkerPool.trouble`)."""
        return 0

    # -- the socket ------------------------------------------------------------------------

    def _send(self, message: Message) -> Connection:
        """Queue a frame; every frame of this turn of the loop leaves in one write."""
        connection = self._connection
        if connection is None or not connection.send(message):
            raise WorkerGone(f"{self._label} worker process {self.pid} is gone")
        return connection

    def _send_inputs(self, message: Message, flush: bool) -> None:
        """Send a message that carries inputs (``flush``: now, not at the turn's end);
        ``InvalidInput`` where they cannot be encoded."""
        try:
            connection = self._send(message)
        except WorkerGone:
            raise
        except Exception as exc:  # inputs that cannot be pickled
            raise InvalidInput(
                f"{self._label}: the inputs cannot be sent to a worker process: {exc}"
            ) from exc
        if flush:
            connection.out.flush()

    def _on_message(self, message: Message) -> None:
        # Bare class patterns, the most frequent first: each class that does not match costs an
        # isinstance through msgspec's metaclass, and positional captures cost more again.
        match message:
            case Answer() | Results():
                call = self._last(message.cid)
                if call is not None:
                    call.answer(message.value)
                    self._gate.release(self)
            case Item():
                cid = message.cid
                call = self._calls.get(cid)
                if call is not None:
                    call.push(message.value)
                    self._arm(cid, call)
            case End():
                call = self._last(message.cid)
                if call is not None:
                    call.stop()
                    self._gate.release(self)
            case Stepped():
                self._steps.answered(message)
            case Error():
                error = message.failed.exception()
                if self._steps.failed(message.cid, error):
                    return
                call = self._last(message.cid)
                if call is not None:
                    call.fail(error)
                    self._gate.release(self)
                    self._on_device_error(self, error)  # (counts OOMs, replaces lost devices)
            case Report():
                if message.compute is not None:
                    self._stats.merge_compute(message.compute, self._on_gpu)
                if message.metrics:
                    self._stats.custom.apply(message.metrics)
            case Ready():
                if self._ready is not None and not self._ready.done():
                    self._ready.set_result(message)
            case StartFailed():
                self._ending = _Ending.FAILED_TO_START
                self._why = _Ending.FAILED_TO_START.value
                if self._ready is not None and not self._ready.done():
                    self._ready.set_exception(
                        WorkerDied(f"{self._label} worker process {self.pid}: {message.reason}")
                    )

    def _last(self, cid: int) -> PendingCall | None:
        """The call ``cid`` has had its last message: forget it (its slot is freed next). The
        worker starts the next queued call now: its deadline starts."""
        call = self._calls.pop(cid, None)
        if call is not None:
            if call.started:
                self._running -= 1
                if self._queued:
                    self._start_queued()
        return call

    def _start_queued(self) -> None:
        if self._ending is _Ending.RECYCLED:  # being killed: what is queued goes elsewhere
            return
        queued, calls = self._queued, self._calls
        while queued and self._running < self.slots:
            cid = queued.popleft()
            call = calls.get(cid)
            if call is not None:  # not cancelled meanwhile
                self._start(cid, call)

    def _start(self, cid: int, call: PendingCall) -> None:
        call.started = True
        self._running += 1
        self._arm(cid, call)

    def _hold_place(self) -> None:
        """Leave the gate, but count as starting until the pool has taken over the restart:
        requests meanwhile wait for the replacement instead of being refused."""
        self._gate.remove(self)
        if self._was_ready and not self._holding and self._ending is not _Ending.STOPPED:
            self._holding = True
            self._gate.starting += 1

    def _on_lost(self) -> None:
        self._hold_place()
        if self.state is WorkerState.STARTING or self.state is WorkerState.READY:
            self.state = WorkerState.STOPPING
        asyncio.get_running_loop().create_task(self._reap())

    async def _reap(self) -> None:
        """The socket closed: the process is gone or going. Fail what it held, name how it ended."""
        code = await self._exit()
        connection = self._connection
        if self._init.shm:  # the rings: a name that no reader mapped, our own mappings
            Ring.sweep(self._init.shm)
            if connection is not None:
                if connection.encoder.ring is not None:
                    connection.encoder.ring.close()
                connection.decoder.close()
        how = describe_exit(code)
        ending = self._ending
        if ending is None:
            reason = f"{self._label} worker process {self.pid} died: it {how}"
        else:
            reason = f"{self._label} worker process {self.pid} {how} ({self._why})"
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(WorkerDied(reason))
        self._steps.died(WorkerDied(f"{reason}; the step it was running failed"))
        calls, self._calls = self._calls, {}
        self._queued.clear()
        self._running = 0
        for call in calls.values():
            if call.started or not self.ahead:
                call.fail(WorkerDied(f"{reason}; the request it was running failed"))
            else:  # queued there, never started: another worker takes it
                call.fail(WorkerGone(f"{reason}; the request queued in it had not started"))
            self._gate.release(self)
        was_ready = self._was_ready
        self.state = WorkerState.DEAD
        if self._exited is not None and not self._exited.done():
            self._exited.set_result(None)
        try:
            if (ending is None or ending is _Ending.RECYCLED) and was_ready:
                lived = time.time() - self.started
                self._on_exit(self, reason, crashed=ending is None, lived=lived)
        finally:
            if self._holding:
                self._holding = False
                self._gate.starting -= 1

    # -- requests --------------------------------------------------------------------------

    def _arm(self, cid: int, call: PendingCall) -> None:
        """Its deadline: response_timeout from now. No timer per call: one sweep per worker
        checks the deadlines every quarter of the timeout (at most 1 s), so a predict fails
        between response_timeout and a quarter more after it started."""
        if self._timeout:
            loop = asyncio.get_running_loop()
            call.deadline = loop.time() + self._timeout
            if self._sweeper is None:
                self._sweeper = loop.call_later(self._tick, self._sweep)

    def _sweep(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        late = [cid for cid, c in self._calls.items() if c.started and 0 < c.deadline <= now]
        for cid in late:
            self._on_timeout(cid)
        self._sweeper = loop.call_later(self._tick, self._sweep) if self._calls else None

    def _on_timeout(self, cid: int) -> None:
        call = self._calls.pop(cid, None)
        if call is None:
            return
        self._running -= 1  # a started call: the process goes, the queued ones with it
        error = ResponseTimeout(
            f"{self._label} predict did not answer within response_timeout {self._timeout:g} s; "
            f"worker process {self.pid} is being restarted"
        )
        call.fail(error)
        self._gate.release(self)
        logger.warning("%s", error)
        self.recycle(f"recycled after a predict ran past response_timeout {self._timeout:g} s")

    def _begin(
        self, kind: type[Infer | Batch], inputs: Any, snapshot: Any, stream: bool
    ) -> tuple[int, PendingCall]:
        if self.state is not _READY:
            self._gate.release(self)
            raise WorkerGone(f"{self._label} worker process {self.pid} is gone")
        cid = next(self._ids)
        call = PendingCall(None if stream else asyncio.get_running_loop().create_future())
        try:
            if kind is Batch:  # serves several requests
                message: Message = Batch(cid, inputs, snapshot)
            else:
                message = Infer(cid, inputs, snapshot, request_id(), stream)
            # Nothing in flight: the worker waits for this one alone, and a request arriving
            # later in this turn gains nothing from sharing its write. It leaves now, a turn of
            # the loop sooner (one request at a time: the latency a process worker adds).
            self._send_inputs(message, flush=not self._calls)
        except BaseException:
            self._gate.release(self)
            raise
        self._calls[cid] = call
        if not self.ahead or self._running < self.slots:
            self._start(cid, call)
        else:
            self._queued.append(cid)
        return cid, call

    async def _snapshot(self, request: Any, release: bool = True) -> Any:
        """What of ``request`` crosses to the worker process; where it cannot be taken, the
        slot of the call is given back (``release``)."""
        if request is None:
            return None
        try:
            if self._codec is None:
                raise ModelError(f"{self._label} takes the request, but no request codec is set")
            return await self._codec.snapshot(request)
        except BaseException:
            if release:
                self._gate.release(self)
            raise

    def _abandon(self, cid: int) -> None:
        """The caller went away: the worker cancels the request; its slot frees on End."""
        if cid in self._calls:
            with contextlib.suppress(WorkerGone):
                self._send(Cancel(cid))

    def infer(self, inputs: Any, request: Any) -> Coroutine[Any, Any, Any]:
        return self._call(Infer, inputs, request)

    def batch(self, inputs: list[Any], requests: list[Any]) -> Coroutine[Any, Any, Any]:
        return self._call(Batch, inputs, requests)

    async def _call(
        self, kind: type[Infer | Batch], inputs: Any, request: Any, traced: bool = False
    ) -> Any:
        """One request (``Infer``) or batch (``Batch``: ``request`` is the list of the
        requests) in the worker process, and its answer."""
        hooks = tracing.hooks
        if hooks is not None and not traced:  # its span, around this same call
            with hooks.remote(self._model, self._version, self.pid):
                return await self._call(kind, inputs, request, True)
        if kind is Batch:
            snapshot: Any = [await self._snapshot(r) for r in request]
        else:
            snapshot = await self._snapshot(request)
        cid, call = self._begin(kind, inputs, snapshot, stream=False)
        future = call.future
        assert future is not None
        try:
            return await future
        except asyncio.CancelledError:
            self._abandon(cid)
            raise
        except BaseException:
            del future, call  # (its error's traceback holds this frame: no cycle through them)
            raise

    async def stream(
        self, inputs: Any, request: Any, traced: bool = False
    ) -> AsyncGenerator[Any, None]:
        hooks = tracing.hooks
        if hooks is not None and not traced:  # its span, around this same stream
            with hooks.remote(self._model, self._version, self.pid):
                async with contextlib.aclosing(self.stream(inputs, request, True)) as inner:
                    async for item in inner:
                        yield item
            return
        snapshot = await self._snapshot(request)
        cid, call = self._begin(Infer, inputs, snapshot, stream=True)
        taken = 0
        half = max(1, self._window // 2)
        items = call.items
        assert items is not None
        try:
            while True:
                item = await items.get()
                if item is END:
                    return
                if isinstance(item, Failure):
                    item.raise_once()
                yield item
                taken += 1
                if taken >= half and cid in self._calls:
                    self._send(Credit(cid, taken))
                    taken = 0
        finally:
            self._abandon(cid)

    async def step(self, batch: list[Generation]) -> dict[Generation, BaseException] | None:
        """One step of a continuous batch, run by the model in the worker process (``_steps``):
        ``batch`` gets the items it emitted and its finish flags; returns the requests whose
        preprocess failed, with their errors. Runs in the slot its lane holds."""
        if self.state is not _READY:
            raise WorkerGone(f"{self._label} worker process {self.pid} is gone")
        requests = [gen.request for gen in self._steps.joining(batch)]
        has = any(r is not None for r in requests)
        snapshots = [await self._snapshot(r, release=False) for r in requests] if has else []
        message, answer = self._steps.begin(next(self._ids), batch, snapshots)
        try:
            self._send_inputs(message, flush=True)  # the lane waits for this step alone
            reply = await answer
        except BaseException:
            self._steps.forget(message.cid, batch)
            raise
        return self._steps.apply(batch, reply)
