"""Process workers, the server's side: one worker process per instance, over a socket pair.

The worker process (``python -m podium.runtime._child``, started fresh: spawn, never fork, since
the server runs thread pools and gRPC threads) builds the model itself from its ``ModelSource``
and runs preprocess → predict → postprocess for each request. The server reads the worker's
socket from the event loop (an ``asyncio.Protocol``: no polling) and writes one frame per request
(``_wire``: pickle protocol 5, large buffers out of band). Messages:

    server → worker   ("call", id, op, inputs, request snapshot)   op: infer | stream | batch
                      ("cancel", id)          the client left: cancel it, is_disconnected() true
                      ("credit", id, n)       a stream's reader took n more items
    worker → server   ("ready", description) / ("failed", reason)   once, after building
                      ("ok", id, value) / ("err", id, error)         the answer
                      ("item", id, value) ... ("end", id)            a stream
                      ("done", id)            a cancelled request has stopped

A worker process that dies fails the requests it held at once with ``WorkerDied`` (naming its
pid and how it ended); the pool starts another. A predict past ``response_timeout`` fails with
``ResponseTimeout`` and the process is killed and replaced (the only way to stop a sync call).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

from ..errors import InvalidInput, ModelError, ResponseTimeout, WorkerDied
from ..model._source import ModelSource
from ..types import Generation, InputKind
from . import _wire
from ._gate import WorkerGate

__all__ = ["ProcessWorker", "RemoteInstance", "WorkerGone"]

logger = logging.getLogger("podium.workers")

#: The directory holding the ``podium`` package: the worker imports this very Podium.
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])

#: Seconds a worker process gets to exit after its socket is closed before it is killed.
STOP_TIMEOUT = 5.0


class WorkerGone(WorkerDied):
    """The worker died before the request was sent to it: the request can go to another."""


class RemoteInstance:
    """What the server knows of a model that runs in worker processes (the version's
    ``instance``): the flags front ends read, filled in by the first worker that starts.
    ``preprocess`` and ``postprocess`` run in the worker, so they are off here; validation of
    pydantic inputs is deferred to the worker too."""

    input_schema: type | None

    def __init__(self) -> None:
        self.needs_inputs = True
        self.needs_request = False
        self.input_kind = InputKind.DEFAULT
        self.input_schema: type | None = None
        self.streaming = False
        self.predict_on_infer = False
        self.consumes_stream = False
        self.predict_in_thread = False  # the worker process times its own predicts
        self.continuous = False  # continuous batching runs on thread workers only
        self.has_preprocess = False
        self.has_postprocess = False
        self.pipelined = False  # the real instance has preprocess or postprocess

    def describe(self, description: Mapping[str, Any]) -> None:
        self.needs_inputs = description["needs_inputs"]
        self.needs_request = description["needs_request"]
        self.input_kind = description["input_kind"]
        self.streaming = description["streaming"]
        self.predict_on_infer = description["predict_on_infer"]
        self.consumes_stream = description["consumes_stream"]
        self.pipelined = description["pipelined"]

    async def load(self) -> None:
        return None

    def validate(self, value: Any) -> Any:
        return _wire.Unvalidated(value)

    async def preprocess(self, inputs: Any, request: Any) -> Any:
        return inputs

    async def postprocess(self, outputs: Any, request: Any) -> Any:
        return outputs

    async def predict(self, inputs: Any, request: Any) -> Any:
        raise RuntimeError("a process worker's model runs in its worker processes")

    async def step(self, batch: list[Generation]) -> None:
        raise RuntimeError("continuous batching runs on thread workers only")

    def predict_stream(self, inputs: Any, request: Any) -> AsyncGenerator[Any, None]:
        raise RuntimeError("a process worker's model runs in its worker processes")

    def predict_input_stream(
        self, inputs: AsyncIterator[Any], request: Any
    ) -> AsyncGenerator[Any, None]:
        raise RuntimeError("a process worker's model runs in its worker processes")


def describe_exit(code: int | None) -> str:
    if code is None:
        return "is gone"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by signal {-code} ({name})"
    return f"exited with code {code}"


class _Call:
    __slots__ = ("future", "items", "wake", "timer", "stream")

    def __init__(self, future: asyncio.Future[Any] | None) -> None:
        self.future = future
        self.stream = future is None
        self.items: collections.deque[tuple[str, Any]] = collections.deque()
        self.wake: asyncio.Future[None] | None = None
        self.timer: asyncio.TimerHandle | None = None


class _Connection(asyncio.Protocol):
    def __init__(self, on_message: Callable[[Any], None], on_lost: Callable[[], None]) -> None:
        self._decoder = _wire.Decoder(on_message)
        self._on_lost = on_lost

    def data_received(self, data: bytes) -> None:
        self._decoder.feed(data)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._on_lost()


class ProcessWorker:
    """One worker process holding one instance; ``capacity`` requests at a time."""

    kind = "process"

    def __init__(
        self,
        wid: str,
        *,
        source: ModelSource,
        secrets: Any,
        codec: Any,
        gate: WorkerGate,
        descriptor: RemoteInstance,
        label: str,
        batching: bool,
        on_exit: Callable[..., None],
        threads: int = 16,
        log_level: int | None = None,
    ) -> None:
        config = source.config
        self.id = wid
        self.instance = descriptor
        self.pid: int | None = None
        self.state = "starting"
        self.busy = 0
        self.capacity = config.predict_concurrency
        self.started = time.time()
        self._source = source
        self._secrets = secrets
        self._codec = codec
        self._gate = gate
        self._label = label
        self._batching = batching
        self._on_exit = on_exit
        self._threads = threads
        self._log_level = (
            logging.getLogger().getEffectiveLevel() if log_level is None else log_level
        )
        self._timeout = config.response_timeout_s
        self._window = config.stream_buffer
        self._calls: dict[int, _Call] = {}
        self._ids = itertools.count(1)
        self._proc: asyncio.subprocess.Process | None = None
        self._transport: asyncio.Transport | None = None
        self._ready: asyncio.Future[Any] | None = None
        self._exited: asyncio.Future[None] | None = None
        self._ending: str | None = None  # why we are ending it: not a crash
        self._idle: asyncio.Event | None = None
        self._was_ready = False
        self._holding = False  # counted in the gate's ``starting`` while it is being replaced

    # -- starting and stopping -------------------------------------------------------------

    async def start(self) -> None:
        """Spawn the process and wait until it has built and loaded the model; raises
        ``WorkerDied`` with the reason when it cannot."""
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        package_root = _PACKAGE_ROOT
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (package_root, env.get("PYTHONPATH", "")) if p
        )
        try:
            self._proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "podium.runtime._child",
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
        transport, _ = await loop.create_unix_connection(
            lambda: _Connection(self._on_message, self._on_lost), sock=ours
        )
        self._transport = transport
        init = {
            "source": self._source,
            "secrets": self._secrets,
            "rebuild": getattr(self._codec, "rebuild", None),
            "worker": self.id,
            "threads": self._threads,
            "log_level": self._log_level,
            "batching": self._batching,
        }
        self._send(("init", init))
        try:
            description = await self._ready
        except BaseException:
            await self.close()
            raise
        self.instance.describe(description)
        if description["pipelined"] and not self._batching:
            # predict_concurrency bounds predict inside the worker; as many requests again may be
            # in its preprocess/postprocess meanwhile (the rest wait here, where a crash loses none)
            self.capacity *= 2
        self.started = time.time()
        self.state = "ready"
        self._was_ready = True

    async def close(self) -> None:
        """Close its socket (the process exits on EOF); kill it after STOP_TIMEOUT."""
        if self._ending is None:
            self._ending = "stopped"
        if self.state != "dead":
            self.state = "stopping"
        if self._transport is not None:
            self._transport.close()
        proc = self._proc
        if proc is not None and proc.returncode is None:
            try:
                await asyncio.wait_for(proc.wait(), STOP_TIMEOUT)
            except TimeoutError:
                logger.warning(
                    "%s: worker process %s did not exit; killing it", self._label, proc.pid
                )
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        if self._exited is not None and not self._exited.done():
            await asyncio.shield(self._exited)
        self.state = "dead"

    def recycle(self, why: str) -> None:
        """Kill the process now (a stuck predict cannot be stopped otherwise); it is replaced."""
        if self._ending is None:
            self._ending = why
        self._hold_place()
        proc = self._proc
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()

    async def wait_idle(self) -> None:
        if self.busy:
            self._idle = asyncio.Event()
            await self._idle.wait()

    def _release(self) -> None:
        self._gate.release(self)
        if self.busy == 0 and self._idle is not None:
            self._idle.set()

    # -- the socket ------------------------------------------------------------------------

    def _send(self, message: Any) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            raise WorkerGone(f"{self._label} worker process {self.pid} is gone")
        transport.writelines(_wire.encode(message))

    def _on_message(self, message: Any) -> None:
        kind = message[0]
        if kind == "item":
            call = self._calls.get(message[1])
            if call is not None:
                self._push(call, ("item", message[2]))
                self._arm(message[1], call)
            return
        if kind in ("ok", "err", "end", "done"):
            call = self._calls.pop(message[1], None)
            if call is None:
                return
            if call.timer is not None:
                call.timer.cancel()
            value = _wire.unpack_error(message[2]) if kind == "err" else message[-1]
            self._finish(call, kind, value)
            self._release()
            return
        if kind == "ready":
            if self._ready is not None and not self._ready.done():
                self._ready.set_result(message[1])
            return
        if kind == "failed":
            self._ending = "failed to start"
            if self._ready is not None and not self._ready.done():
                self._ready.set_exception(
                    WorkerDied(f"{self._label} worker process {self.pid}: {message[1]}")
                )

    def _finish(self, call: _Call, kind: str, value: Any) -> None:
        if call.stream:
            self._push(call, (kind, value))
            return
        future = call.future
        if future is None or future.done():
            return
        if kind == "ok":
            future.set_result(value)
        elif kind == "err":
            future.set_exception(value)
        else:
            future.cancel()

    @staticmethod
    def _push(call: _Call, entry: tuple[str, Any]) -> None:
        call.items.append(entry)
        if call.wake is not None and not call.wake.done():
            call.wake.set_result(None)

    def _hold_place(self) -> None:
        """Leave the gate, but count as starting until the pool has taken over the restart:
        requests meanwhile wait for the replacement instead of being refused."""
        self._gate.remove(self)
        if self._was_ready and not self._holding and self._ending not in ("stopped",):
            self._holding = True
            self._gate.starting += 1

    def _on_lost(self) -> None:
        self._hold_place()
        if self.state in ("starting", "ready"):
            self.state = "stopping"
        asyncio.get_running_loop().create_task(self._reap())

    async def _reap(self) -> None:
        """The socket closed: the process is gone or going. Fail what it held, name how it ended."""
        proc = self._proc
        code = None
        if proc is not None:
            try:
                code = await asyncio.wait_for(proc.wait(), STOP_TIMEOUT)
            except TimeoutError:  # closed its end but lives on: make sure it is gone
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                code = await proc.wait()
        how = describe_exit(code)
        ending = self._ending
        if ending is None:
            reason = f"{self._label} worker process {self.pid} died: it {how}"
        else:
            reason = f"{self._label} worker process {self.pid} {how} ({ending})"
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(WorkerDied(reason))
        calls, self._calls = self._calls, {}
        for call in calls.values():
            if call.timer is not None:
                call.timer.cancel()
            self._finish(call, "err", WorkerDied(f"{reason}; the request it was running failed"))
            self._release()
        was_ready = self._was_ready
        self.state = "dead"
        if self._exited is not None and not self._exited.done():
            self._exited.set_result(None)
        try:
            if ending not in ("stopped", "failed to start") and was_ready:
                lived = time.time() - self.started
                self._on_exit(self, reason, crashed=ending is None, lived=lived)
        finally:
            if self._holding:
                self._holding = False
                self._gate.starting -= 1

    # -- requests --------------------------------------------------------------------------

    def _arm(self, cid: int, call: _Call) -> None:
        if self._timeout:
            if call.timer is not None:
                call.timer.cancel()
            call.timer = asyncio.get_running_loop().call_later(self._timeout, self._expired, cid)

    def _expired(self, cid: int) -> None:
        call = self._calls.pop(cid, None)
        if call is None:
            return
        error = ResponseTimeout(
            f"{self._label} predict did not answer within response_timeout {self._timeout:g} s; "
            f"worker process {self.pid} is being restarted"
        )
        self._finish(call, "err", error)
        self._release()
        logger.warning("%s", error)
        self.recycle(f"recycled after a predict ran past response_timeout {self._timeout:g} s")

    def _begin(self, op: str, inputs: Any, snapshot: Any, stream: bool) -> tuple[int, _Call]:
        if self.state != "ready":
            self._release()
            raise WorkerGone(f"{self._label} worker process {self.pid} is gone")
        cid = next(self._ids)
        call = _Call(None if stream else asyncio.get_running_loop().create_future())
        try:
            self._send(("call", cid, op, inputs, snapshot))
        except WorkerGone:
            self._release()
            raise
        except Exception as exc:  # inputs that cannot be pickled
            self._release()
            raise InvalidInput(
                f"{self._label}: the inputs cannot be sent to a worker process: {exc}"
            ) from exc
        self._calls[cid] = call
        self._arm(cid, call)
        return cid, call

    async def _snapshot(self, request: Any) -> Any:
        if request is None:
            return None
        if self._codec is None:
            raise ModelError(f"{self._label} takes the request, but no request codec is set")
        return await self._codec.snapshot(request)

    def _abandon(self, cid: int) -> None:
        """The caller went away: the worker cancels the request; its slot frees on "done"."""
        if cid in self._calls:
            with contextlib.suppress(WorkerGone):
                self._send(("cancel", cid))

    async def _call(self, op: str, inputs: Any, snapshot: Any) -> Any:
        cid, call = self._begin(op, inputs, snapshot, stream=False)
        assert call.future is not None
        try:
            return await call.future
        except asyncio.CancelledError:
            self._abandon(cid)
            raise

    async def infer(self, inputs: Any, request: Any) -> Any:
        try:
            snapshot = await self._snapshot(request)
        except BaseException:
            self._release()
            raise
        return await self._call("infer", inputs, snapshot)

    async def batch(self, inputs: list[Any], requests: list[Any]) -> Any:
        try:
            snapshots = [await self._snapshot(r) for r in requests]
        except BaseException:
            self._release()
            raise
        return await self._call("batch", inputs, snapshots)

    async def stream(self, inputs: Any, request: Any) -> AsyncGenerator[Any, None]:
        try:
            snapshot = await self._snapshot(request)
        except BaseException:
            self._release()
            raise
        cid, call = self._begin("stream", inputs, snapshot, stream=True)
        taken = 0
        half = max(1, self._window // 2)
        loop = asyncio.get_running_loop()
        try:
            while True:
                if not call.items:
                    call.wake = loop.create_future()
                    await call.wake
                    call.wake = None
                kind, value = call.items.popleft()
                if kind == "item":
                    yield value
                    taken += 1
                    if taken >= half and cid in self._calls:
                        self._send(("credit", cid, taken))
                        taken = 0
                elif kind == "err":
                    raise value
                else:
                    return
        finally:
            self._abandon(cid)
