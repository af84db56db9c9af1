"""Whether calls are relayed or served by ``grpc.aio``, decided when the first server that would
relay starts (never at import) and kept for the process.

The relay runs on grpcio internals that no release promises to keep (:mod:`._internals`). Two
checks stand between a grpcio upgrade and a broken or silently slower server:

1. :func:`~._internals.load` checks every name, parameter list and per-call attribute the relay
   uses (microseconds);
2. :func:`self_test` then serves a few real calls through the relay, on a private server on a
   loopback port with this loop behind it: a unary call with trailing metadata, an abort, a
   response stream longer than the window, and a bidirectional stream with trailing metadata
   (every kind of call the relay's serving loop serves, :mod:`._serving`). It proves that the
   internals still behave as the relay expects, once, at start-up (tens of milliseconds); the
   calls the server then serves pay nothing for it.

Either failing makes :func:`check` choose :attr:`Mode.AIO` with the reason: the server is then a
``grpc.aio`` server, which serves the same coroutine handlers without grpcio's internals. It logs
the mode it serves with, the reason and the grpcio version when it starts.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import grpc

from ._bridge import Bridge
from ._context import Status
from ._internals import Internals, InternalsDiffer, load
from ._relay import WINDOW

__all__ = [
    "SELF_TEST_TIME_LIMIT_S",
    "Decision",
    "Mode",
    "SelfTestFailed",
    "check",
    "decide",
    "self_test",
]

#: Seconds the self-test may take in all before the relay is given up (it takes milliseconds).
SELF_TEST_TIME_LIMIT_S = 5.0


class Mode(enum.Enum):
    """How a gRPC inference server serves its calls."""

    RELAYED = "relayed"  # a grpc.server, calls relayed through grpcio's internals
    AIO = "aio"  # a grpc.aio server: public API only, slower per call


@dataclass(frozen=True, slots=True)
class Decision:
    """The mode, the internals that serve it (``None`` for :attr:`Mode.AIO`), and why not
    relayed."""

    mode: Mode
    internals: Internals | None = None
    reason: str = ""

    @classmethod
    def aio(cls, reason: str) -> Decision:
        return cls(Mode.AIO, None, reason)

    def describe(self) -> str:
        """One line for the log: the mode, the grpcio version, and why not relayed."""
        if self.mode is Mode.RELAYED:
            return f"calls relayed through grpcio {grpc.__version__}'s internals"
        return (
            f"calls served by grpc.aio, slower per call than relayed "
            f"(grpcio {grpc.__version__}: {self.reason})"
        )


class SelfTestFailed(Exception):
    """A call of the self-test did not come back as the relay should have served it."""


async def check(
    status: Status,
    *,
    internals: Internals | None = None,
    time_limit_s: float = SELF_TEST_TIME_LIMIT_S,
) -> Decision:
    """Relayed when ``internals`` (by default grpcio's own, :func:`~._internals.load`) pass the
    self-test; otherwise ``grpc.aio``, with the reason. Call it on the loop that the bridge will
    serve from; ``status`` is the server's (see :class:`~._bridge.Bridge`)."""
    if internals is None:
        try:
            internals = load()
        except InternalsDiffer as exc:
            return Decision.aio(f"its internals are not what the relay expects: {exc}")
    try:
        await self_test(internals, status, time_limit_s=time_limit_s)
    except Exception as exc:  # whatever went wrong, the relay is not to be trusted
        return Decision.aio(f"the relay's self-test failed: {_said(exc)}")
    return Decision(Mode.RELAYED, internals)


_decided: Decision | None = None


async def decide(status: Status) -> Decision:
    """:func:`check` with grpcio's own internals, once per process: its outcome depends on the
    installed grpcio alone."""
    global _decided
    if _decided is None:
        _decided = await check(status)
    return _decided


_SERVICE = "podium.bridge.SelfTest"
_STREAMED = WINDOW + 2  # past the window: the loop waits for room, grpc's thread wakes it


async def self_test(
    internals: Internals, status: Status, *, time_limit_s: float = SELF_TEST_TIME_LIMIT_S
) -> None:
    """Serve the self-test's calls through ``internals`` on a private loopback server; raises
    if one does not come back exactly as expected within ``time_limit_s`` seconds."""
    loop = asyncio.get_running_loop()
    # grpc.server wants a pool; every method is relayed, so no call runs in it.
    pool = ThreadPoolExecutor(1, thread_name_prefix="podium-grpc-self-test")
    bridge = Bridge(loop, internals=internals, status=status)
    server = grpc.server(pool, options=[("grpc.so_reuseport", 0)])
    try:
        methods = {name: bridge.handler(method) for name, method in _METHODS.items()}
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(_SERVICE, methods),))
        address = _bind(server)
        bridge.start(server)
        await asyncio.wait_for(asyncio.to_thread(_calls, address, time_limit_s), time_limit_s + 1)
    finally:
        stopped = server.stop(0)
        await asyncio.to_thread(stopped.wait, time_limit_s)
        await asyncio.to_thread(bridge.close)
        pool.shutdown(wait=False, cancel_futures=True)


def _bind(server: Any) -> str:
    for host in ("127.0.0.1", "[::1]"):
        try:
            port = server.add_insecure_port(f"{host}:0")
        except RuntimeError:
            continue
        if port:
            return f"{host}:{port}"
    raise SelfTestFailed("no loopback port to serve the self-test on")


async def _unary(request: bytes, context: Any) -> bytes:
    await asyncio.sleep(0)  # a real suspension on the loop
    context.set_trailing_metadata((("x-self-test", "1"),))
    return request[::-1]


async def _abort(request: bytes, context: Any) -> bytes:
    await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "as asked")
    raise AssertionError("context.abort returned")  # pragma: no cover


async def _stream(request: bytes, context: Any) -> AsyncIterator[bytes]:
    for i in range(_STREAMED):
        yield bytes([i])


async def _echo(requests: Any, context: Any) -> AsyncIterator[bytes]:
    async for request in requests:
        yield request
    context.set_trailing_metadata((("x-self-test", "echo"),))


_METHODS: dict[str, grpc.RpcMethodHandler] = {
    "Unary": grpc.unary_unary_rpc_method_handler(_unary),
    "Abort": grpc.unary_unary_rpc_method_handler(_abort),
    "Stream": grpc.unary_stream_rpc_method_handler(_stream),
    "Echo": grpc.stream_stream_rpc_method_handler(_echo),
}


def _calls(address: str, time_limit_s: float) -> None:
    """The client's side (in a thread: the loop serves the handlers)."""
    deadline = time.monotonic() + time_limit_s

    def left() -> float:
        return max(deadline - time.monotonic(), 0.001)

    def expect(method: str, ok: bool, got: Any) -> None:
        if not ok:
            raise SelfTestFailed(f"{method} answered {got!r}")

    # No proxy: the self-test talks to this process, whatever http_proxy says.
    with grpc.insecure_channel(address, options=[("grpc.enable_http_proxy", 0)]) as channel:
        path = f"/{_SERVICE}/"
        reply, call = channel.unary_unary(path + "Unary").with_call(b"podium", timeout=left())
        expect("Unary", reply == b"muidop", reply)
        trailing = tuple(call.trailing_metadata() or ())
        expect("Unary", ("x-self-test", "1") in trailing, trailing)
        try:
            channel.unary_unary(path + "Abort")(b"", timeout=left())
        except grpc.RpcError as exc:
            got = (exc.code(), exc.details())
            expect("Abort", got == (grpc.StatusCode.FAILED_PRECONDITION, "as asked"), got)
        else:
            expect("Abort", False, "OK")
        items = list(channel.unary_stream(path + "Stream")(b"", timeout=left()))
        expect("Stream", items == [bytes([i]) for i in range(_STREAMED)], items)
        sent = [b"a", b"b", b"c"]
        echo = channel.stream_stream(path + "Echo")(iter(sent), timeout=left())
        echoed = list(echo)
        expect("Echo", echoed == sent, echoed)
        trailing = tuple(echo.trailing_metadata() or ())
        expect("Echo", ("x-self-test", "echo") in trailing, trailing)


def _said(exc: BaseException) -> str:
    """An exception in one line (an ``RpcError`` by its code and details)."""
    if isinstance(exc, grpc.RpcError) and hasattr(exc, "code"):
        return f"{exc.code().name}: {exc.details()}"
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    return str(exc) or type(exc).__name__
