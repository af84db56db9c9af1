"""Process workers, the worker's side: ``python -m podium.runtime._child FD PARENT_PID``.

The worker reads its orders from the socket ``FD`` (see ``_proc`` for the messages), builds the
model from the ``ModelSource`` it is sent (``loading.prepare`` + ``loading.build_instance``, so
every contract works), and serves requests with the same scheduler the server uses in-process:
``preprocess`` and ``postprocess`` outside the ``predict_concurrency`` slots, streams through a
window of ``stream_buffer`` items that the server's reader refills (back-pressure), async work
cancelled and generators closed when the server says the client left.

It never outlives the server: it exits when its socket reaches EOF (the server closed it or
died), and on Linux the kernel kills it if the server dies (``PR_SET_PDEATHSIG``). It ignores
SIGINT and runs in its own session: the server decides when it stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import importlib
import logging
import os
import signal
import socket
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..config import Secrets
from ..errors import ModelError, PodiumError
from ..model._calls import model_error
from . import _wire
from ._scheduler import SlotGate

logger = logging.getLogger("podium.worker")

_DISCONNECT = {"type": "http.disconnect"}


def _die_with_parent(parent: int) -> None:
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # it died before we asked to follow it
        os._exit(0)


class _Window:
    """How many more stream items the server's reader will take (its buffer's free room)."""

    def __init__(self, size: int) -> None:
        self.room = size
        self._more: asyncio.Event | None = None

    async def take(self) -> None:
        while self.room <= 0:
            self._more = asyncio.Event()
            await self._more.wait()
        self.room -= 1

    def add(self, n: int) -> None:
        self.room += n
        if self._more is not None:
            self._more.set()


class _Request:
    __slots__ = ("task", "gone", "window")

    def __init__(self, task: asyncio.Task[None], gone: asyncio.Event, window: _Window) -> None:
        self.task = task
        self.gone = gone
        self.window = window


class Child(asyncio.Protocol):
    def __init__(self, closed: asyncio.Event) -> None:
        self._decoder = _wire.Decoder(self._on_message)
        self._closed = closed
        self._transport: Any = None
        self._requests: dict[int, _Request] = {}
        self._setup: asyncio.Task[None] | None = None
        self.instance: Any = None
        self.scheduler: Any = None
        self.gate: SlotGate | None = None
        self.rebuild: Any = None
        self.name = "?"
        self.stream_buffer = 16

    # -- the socket ------------------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        self._decoder.feed(data)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed.set()

    def send(self, message: Any) -> None:
        if not self._transport.is_closing():
            self._transport.writelines(_wire.encode(message))

    def _on_message(self, message: Any) -> None:
        kind = message[0]
        if kind == "call":
            _, cid, op, inputs, snapshot = message
            gone = asyncio.Event()
            window = _Window(self.stream_buffer)
            task = asyncio.get_running_loop().create_task(
                self._run(cid, op, inputs, snapshot, gone, window)
            )
            self._requests[cid] = _Request(task, gone, window)
            task.add_done_callback(lambda _: self._requests.pop(cid, None))
        elif kind == "cancel":
            request = self._requests.get(message[1])
            if request is not None:
                request.gone.set()
                request.task.cancel()
        elif kind == "credit":
            request = self._requests.get(message[1])
            if request is not None:
                request.window.add(message[2])
        elif kind == "init":
            self._setup = asyncio.get_running_loop().create_task(self._build(message[1]))

    # -- building the model ----------------------------------------------------------------

    async def _build(self, init: dict[str, Any]) -> None:
        from .direct import DirectScheduler
        from .loading import build_instance, prepare

        source = init["source"]
        config = source.config
        self.name = config.name
        self.stream_buffer = config.stream_buffer
        logging.basicConfig(
            level=init["log_level"],
            format=f"%(asctime)s %(levelname)s %(name)s [worker {init['worker']} pid {os.getpid()}]: %(message)s",
            stream=sys.stderr,
        )
        secrets = init["secrets"]
        if isinstance(secrets, tuple) and secrets and secrets[0] == "secrets-dir":
            secrets = Secrets(secrets[1])
        loop = asyncio.get_running_loop()
        executor = ThreadPoolExecutor(init["threads"], thread_name_prefix="podium-model")
        try:
            prepared = await loop.run_in_executor(executor, prepare, source)
            build = functools.partial(
                build_instance, source, prepared, secrets=secrets, executor=executor
            )
            instance = await loop.run_in_executor(executor, build)
            await instance.load()
            if init["rebuild"]:
                module, _, name = init["rebuild"].partition(":")
                self.rebuild = getattr(importlib.import_module(module), name)
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}"
            if isinstance(exc, PodiumError):
                reason = exc.message
            logger.error("model '%s' could not start in a worker process: %s", self.name, reason)
            self.send(("failed", reason))
            return
        self.instance = instance
        concurrency = config.predict_concurrency
        if init["batching"]:
            self.gate = SlotGate(config.name, concurrency, 1 << 30)
        else:
            self.scheduler = DirectScheduler(
                instance,
                model=config.name,
                concurrency=concurrency,
                max_queue_size=1 << 30,
                stream_buffer=1,  # the window to the server is the stream's real buffer
            )
        self.send(
            (
                "ready",
                {
                    "needs_inputs": instance.needs_inputs,
                    "needs_request": instance.needs_request,
                    "input_kind": instance.input_kind,
                    "streaming": instance.streaming,
                    "predict_on_infer": instance.predict_on_infer,
                    "consumes_stream": instance.consumes_stream,
                    "pipelined": instance.has_preprocess or instance.has_postprocess,
                },
            )
        )

    # -- serving ---------------------------------------------------------------------------

    def _request(self, snapshot: Any, gone: asyncio.Event) -> Any:
        if snapshot is None or self.rebuild is None:
            return None

        async def receive() -> dict[str, Any]:
            await gone.wait()
            return _DISCONNECT

        return self.rebuild(snapshot, receive)

    def _inputs(self, inputs: Any) -> Any:
        if isinstance(inputs, _wire.Unvalidated):
            return self.instance.validate(inputs.value)
        return inputs

    def _answer(self, cid: int, kind: str, value: Any) -> None:
        try:
            self.send((kind, cid, value))
        except Exception as exc:  # the value cannot be pickled
            error = ModelError(
                f"model '{self.name}' returned a value that cannot be sent back from its "
                f"worker process ({type(value).__name__}): {exc}"
            )
            self.send(("err", cid, _wire.pack_error(error)))

    async def _run(
        self,
        cid: int,
        op: str,
        inputs: Any,
        snapshot: Any,
        gone: asyncio.Event,
        window: _Window,
    ) -> None:
        try:
            if op == "batch":
                requests = [self._request(s, gone) for s in snapshot]
                self._answer(cid, "ok", await self._batch(inputs, requests))
            elif op == "stream":
                request = self._request(snapshot, gone)
                items = self.scheduler.stream(self._inputs(inputs), request)
                try:
                    async for item in items:
                        await window.take()
                        self._answer(cid, "item", item)
                finally:
                    await items.aclose()
                self.send(("end", cid))
            else:
                request = self._request(snapshot, gone)
                self._answer(cid, "ok", await self.scheduler.infer(self._inputs(inputs), request))
        except asyncio.CancelledError:
            self.send(("done", cid))
        except Exception as exc:
            error = exc if isinstance(exc, PodiumError) else model_error(self.name, op, exc)
            self.send(("err", cid, _wire.pack_error(error)))

    async def _batch(self, inputs: list[Any], requests: list[Any]) -> list[Any]:
        inst = self.instance
        n = len(inputs)
        failed: list[Any] = [None] * n

        async def pre(i: int) -> Any:
            try:
                value = self._inputs(inputs[i])
                if inst.has_preprocess:
                    value = await inst.preprocess(value, requests[i])
                return value
            except Exception as exc:
                failed[i] = _wire.Failed(_wire.pack_error(exc))
                return None

        values = list(await asyncio.gather(*(pre(i) for i in range(n))))
        live = [i for i in range(n) if failed[i] is None]
        if not live:
            return failed
        assert self.gate is not None
        await self.gate.acquire()
        try:
            outputs = await inst.predict([values[i] for i in live], [requests[i] for i in live])
        finally:
            self.gate.release()
        if not isinstance(outputs, list | tuple) or len(outputs) != len(live):
            return outputs  # the server checks the shape and names the problem
        results: list[Any] = list(failed)
        for i, out in zip(live, outputs, strict=True):
            results[i] = out

        async def post(i: int) -> None:
            try:
                results[i] = await inst.postprocess(results[i], requests[i])
            except Exception as exc:
                results[i] = _wire.Failed(_wire.pack_error(exc))

        if inst.has_postprocess:
            await asyncio.gather(*(post(i) for i in live))
        return results


#: Seconds a model's unload hook may take when its worker process is stopped.
UNLOAD_GRACE = 5.0


async def _serve(sock: socket.socket) -> None:
    loop = asyncio.get_running_loop()
    closed = asyncio.Event()
    child = Child(closed)
    await loop.create_unix_connection(lambda: child, sock=sock)
    await closed.wait()
    # The model's own unload hook (an MLServer runtime's unload()), bounded.
    close = getattr(child.instance, "close", None)
    if close is not None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(close(), UNLOAD_GRACE)
    # The server closed the socket (or died). Threads running sync model code cannot be
    # stopped, and asyncio.run would wait for them: leave at once.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main(argv: list[str]) -> None:
    fd, parent = int(argv[0]), int(argv[1])
    _die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sock = socket.socket(fileno=fd)
    try:
        import uvloop

        runner: Any = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a dependency
        runner = asyncio.run
    runner(_serve(sock))


if __name__ == "__main__":
    main(sys.argv[1:])
