"""Raw gRPC echo servers: the physical reference for bench/grpc_bench.py.

    python bench/grpc_echo.py --port P [--server aio|uvloop|sync|direct|handoff|bridge|relay|inline]
                              [--threads N]
                              [--parse bytes|proto] [--host 127.0.0.1]

Serves `inference.GRPCInferenceService/ModelInfer`, `ModelStreamInfer` (N items for a
request whose INT64 input "n" is N, MLServer framing) and `ServerReady` (the readiness
probe) through a generic handler with no model, no data plane and no framework: the least
any Python gRPC server can do per call on this machine.

- `--server aio`: `grpc.aio` on the default asyncio event loop;
  `--server uvloop`: `grpc.aio` under uvloop;
  `--server sync`: `grpc.server` with a `ThreadPoolExecutor` of `--threads` threads (8).
- On grpcio internals (what Podium does since bench/RESULTS.md section 9): ModelInfer is served
  without the thread pool; grpc's polling thread asks for each request message and, when it
  has arrived, `--server direct` answers it there and `--server handoff` hands it to one
  answering thread, which sends the answer with grpc's private `_status`.
- Design probes (not raw references; a sync gRPC front end over an asyncio core):
  `--server bridge`: each ModelInfer handed by a pool thread to a coroutine on a uvloop event
  loop in another thread and waited for (Podium until section 9); `--server relay`: the same,
  but the pool thread does not wait, and the loop sends the answer itself; `--server inline`:
  requests read by the polling thread as in `direct`, the coroutine run on the uvloop thread,
  its result sent by an answering thread (Podium's shape since section 9).
- `--parse bytes`: identity (de)serializers; the handler receives the request as bytes and
  returns the prebuilt response for the benchmark's known requests (a dict lookup), parsing
  only a request it has not seen. `--parse proto`: every request is parsed into a
  `ModelInferRequest` and an echo `ModelInferResponse` is built and serialized, which is
  the work any OIP server has to do at least.

The messages come from tritonclient's generated `service_pb2` (wire names `inference.*`),
imported only in this process. It prints `grpc-echo ready on 127.0.0.1:P` once listening.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from concurrent import futures
from typing import Any

import grpc
from grpc import aio
from grpc_messages import (
    SERVICE,
    echo_response,
    pb,
    request_variants,
    stream_count,
    stream_item,
)

MethodHandler = Any


def _prebuilt() -> dict[bytes, bytes]:
    """Serialized response for each serialized request the benchmark sends."""
    return {
        request.SerializeToString(): echo_response(request).SerializeToString()
        for request in request_variants().values()
    }


def _handlers(
    parse: str,
    asynchronous: bool,
    bridge: asyncio.AbstractEventLoop | None = None,
    relay: bool = False,
    inline: bool = False,
    handoff: bool = False,
) -> dict[str, MethodHandler]:
    """ModelInfer and ServerReady handlers; coroutines for grpc.aio, plain functions for sync.

    With `bridge` (sync server only), ModelInfer runs its coroutine on that event loop (in
    another thread) and the gRPC thread waits for it: a sync server over an async core.
    """
    ready = pb.ServerReadyResponse(ready=True).SerializeToString()
    prebuilt = _prebuilt()
    parse_request = pb.ModelInferRequest.FromString

    def infer_bytes(request: bytes, _context: object) -> bytes:
        found = prebuilt.get(request)
        if found is None:  # not one of the benchmark's requests: echo it properly
            found = echo_response(parse_request(request)).SerializeToString()
        return found

    def infer_proto(request: Any, _context: object) -> Any:
        return echo_response(request)

    def server_ready(_request: bytes, _context: object) -> bytes:
        return ready

    async def infer_bytes_async(request: bytes, _context: object) -> bytes:
        found = prebuilt.get(request)
        if found is None:
            found = echo_response(parse_request(request)).SerializeToString()
        return found

    async def infer_proto_async(request: Any, _context: object) -> Any:
        return echo_response(request)

    async def server_ready_async(_request: bytes, _context: object) -> bytes:
        return ready

    if bridge is not None:
        loop, coro_bytes, coro_proto = bridge, infer_bytes_async, infer_proto_async

        def infer_bytes_bridged(request: bytes, context: object) -> bytes:
            return asyncio.run_coroutine_threadsafe(coro_bytes(request, context), loop).result()

        def infer_proto_bridged(request: Any, context: object) -> Any:
            return asyncio.run_coroutine_threadsafe(coro_proto(request, context), loop).result()

    sync_bytes: Any = infer_bytes if bridge is None else infer_bytes_bridged
    sync_proto: Any = infer_proto if bridge is None else infer_proto_bridged
    infer: Any
    if parse == "bytes":
        infer = infer_bytes_async if asynchronous else sync_bytes
        infer_handler = grpc.unary_unary_rpc_method_handler(infer)
    else:
        infer = infer_proto_async if asynchronous else sync_proto
        infer_handler = grpc.unary_unary_rpc_method_handler(
            infer,
            request_deserializer=parse_request,
            response_serializer=pb.ModelInferResponse.SerializeToString,
        )
    if relay:
        assert bridge is not None
        infer_handler = _relay_handler(
            parse, bridge, coro_bytes if parse == "bytes" else coro_proto
        )
    if inline:
        infer_handler = inline_handler(
            parse,
            bridge,
            infer_bytes_async if parse == "bytes" else infer_proto_async,
            infer_bytes if parse == "bytes" else infer_proto,
            handoff,
        )
    ready_fn: Any = server_ready_async if asynchronous else server_ready
    return {
        "ModelInfer": infer_handler,
        "ModelStreamInfer": _stream_handler(parse, asynchronous),
        "ServerReady": grpc.unary_unary_rpc_method_handler(ready_fn),
    }


def _relay_handler(parse: str, loop: asyncio.AbstractEventLoop, coro: Any) -> MethodHandler:
    """ModelInfer registered as a non-blocking server-streaming method (identical on the wire):
    the gRPC thread hands the request to the loop and returns at once; the loop sends the one
    answer and the status together, as grpc does for a unary call (grpc's private `_status`)."""
    from grpc import _server

    serialize = (lambda m: m) if parse == "bytes" else pb.ModelInferResponse.SerializeToString

    def behavior(request: Any, context: Any, _send: Any) -> None:
        rpc_event, state = context._rpc_event, context._state

        def done(task: asyncio.Task[Any]) -> None:
            _server._status(rpc_event, state, serialize(task.result()))

        def start() -> None:
            loop.create_task(coro(request, context)).add_done_callback(done)

        loop.call_soon_threadsafe(start)

    behavior.experimental_non_blocking = True  # type: ignore[attr-defined]
    return grpc.unary_stream_rpc_method_handler(
        behavior,
        request_deserializer=None if parse == "bytes" else pb.ModelInferRequest.FromString,
        response_serializer=None,
    )


class _Inline(futures.ThreadPoolExecutor):
    """An "executor" that runs what grpc submits at once, on grpc's own polling thread."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> futures.Future[Any]:  # type: ignore[override]
        future: futures.Future[Any] = futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001
            future.set_exception(exc)
        return future


def inline_handler(
    parse: str, loop: asyncio.AbstractEventLoop | None, coro: Any, direct: Any, handoff: bool
) -> MethodHandler:
    """ModelInfer served without grpc's thread pool, on grpcio internals (Podium's way since
    bench/RESULTS.md section 9): registered as a non-blocking bidirectional method that an
    inline executor runs on grpc's polling thread, which asks for the request message; its
    arrival (on the polling thread again) is answered by grpc's private `_status`:

    - `direct`: right there, on the polling thread (`loop` None, `handoff` False);
    - `handoff`: by an answering thread, which builds the echo and sends it;
    - `inline` (the design probe): the coroutine runs on the uvloop thread `loop`, and the
      answering thread sends its result.
    """
    import queue
    import threading

    from grpc import _server
    from grpc._cython import cygrpc

    serialize = (lambda m: m) if parse == "bytes" else pb.ModelInferResponse.SerializeToString
    deserialize = None if parse == "bytes" else pb.ModelInferRequest.FromString
    answers: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def answer() -> None:
        while True:
            rpc_event, state, build = answers.get()
            _server._status(rpc_event, state, serialize(build()))

    if handoff or loop is not None:
        threading.Thread(target=answer, name="answerer", daemon=True).start()

    def behavior(_requests: Any, context: Any, _send: Any) -> None:
        rpc_event, state = context._rpc_event, context._state
        received = _server._receive_message(state, rpc_event.call, deserialize)

        def on_message(event: Any) -> Any:
            outcome = received(event)
            request, state.request = state.request, None
            if request is None:
                return outcome
            if loop is not None:  # the design probe

                def done(task: asyncio.Task[Any]) -> None:
                    answers.put((rpc_event, state, task.result))

                def start() -> None:
                    loop.create_task(coro(request, context)).add_done_callback(done)

                loop.call_soon_threadsafe(start)
            elif handoff:
                answers.put((rpc_event, state, lambda: direct(request, context)))
            else:
                _server._status(rpc_event, state, serialize(direct(request, context)))
            return outcome

        with state.condition:
            rpc_event.call.start_server_batch(
                (cygrpc.ReceiveMessageOperation(_server._EMPTY_FLAGS),), on_message
            )
            state.due.add(_server._RECEIVE_MESSAGE_TOKEN)

    behavior.experimental_non_blocking = True  # type: ignore[attr-defined]
    behavior.experimental_thread_pool = _Inline()  # type: ignore[attr-defined]
    return grpc.stream_stream_rpc_method_handler(behavior)


def _stream_handler(parse: str, asynchronous: bool) -> MethodHandler:
    """ModelStreamInfer, MLServer framing: for each request, N bare ModelInferResponses.

    `bytes`: the items are prebuilt serialized messages (only the request is parsed, for N);
    `proto`: each item is built as a message and serialized by grpc.
    """
    cache: dict[tuple[str, int], bytes] = {}

    def item_bytes(model: str, index: int) -> bytes:
        key = (model, index)
        found = cache.get(key)
        if found is None:
            found = cache[key] = stream_item(model, index).SerializeToString()
        return found

    def items(request: Any) -> Iterator[Any]:
        model, n = request.model_name, stream_count(request)
        if parse == "bytes":
            for i in range(n):
                yield item_bytes(model, i)
        else:
            for i in range(n):
                yield stream_item(model, i)

    def stream_sync(requests: Iterator[Any], _context: object) -> Iterator[Any]:
        for request in requests:
            yield from items(request)

    async def stream_async(requests: AsyncIterator[Any], _context: object) -> AsyncIterator[Any]:
        async for request in requests:
            for item in items(request):
                yield item

    for i in range(1000):  # the benchmark's stream, prebuilt
        item_bytes("stream1000", i)
    serializer = None if parse == "bytes" else pb.ModelInferResponse.SerializeToString
    return grpc.stream_stream_rpc_method_handler(
        stream_async if asynchronous else stream_sync,
        request_deserializer=pb.ModelInferRequest.FromString,
        response_serializer=serializer,
    )


def _options(args: argparse.Namespace) -> list[tuple[str, str | int]]:
    out: list[tuple[str, str | int]] = []
    for item in args.option:
        key, _, value = item.partition("=")
        out.append((key, int(value) if value.lstrip("-").isdigit() else value))
    return out


def _announce(host: str, port: int, args: argparse.Namespace) -> None:
    print(
        f"grpc-echo ready on {host}:{port} (server={args.server}, parse={args.parse})", flush=True
    )


async def _serve_aio(args: argparse.Namespace) -> None:
    server = aio.server(options=_options(args))
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE, _handlers(args.parse, True)),)
    )
    port = server.add_insecure_port(f"{args.host}:{args.port}")
    await server.start()
    _announce(args.host, port, args)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop(grace=1)


def _bridge_loop() -> asyncio.AbstractEventLoop:
    """A uvloop event loop running forever in a daemon thread."""
    import threading

    import uvloop

    loop = uvloop.new_event_loop()
    threading.Thread(target=loop.run_forever, name="bridge-loop", daemon=True).start()
    return loop


def _serve_sync(args: argparse.Namespace) -> None:
    bridge = _bridge_loop() if args.server in ("bridge", "relay", "inline") else None
    inline = args.server in ("inline", "direct", "handoff")
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=args.threads), options=_options(args)
    )
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                SERVICE,
                _handlers(
                    args.parse,
                    False,
                    bridge,
                    args.server == "relay",
                    inline,
                    args.server == "handoff",
                ),
            ),
        )
    )
    port = server.add_insecure_port(f"{args.host}:{args.port}")
    server.start()
    _announce(args.host, port, args)

    def _stop(_signum: int, _frame: object) -> None:
        server.stop(grace=1)

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    server.wait_for_termination()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument(
        "--server",
        choices=("aio", "uvloop", "sync", "bridge", "relay", "inline", "direct", "handoff"),
        default="aio",
    )
    parser.add_argument("--threads", type=int, default=8, help="sync server's thread pool")
    parser.add_argument("--parse", choices=("bytes", "proto"), default="bytes")
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a gRPC server channel option (integer values are passed as int); repeatable",
    )
    args = parser.parse_args(argv)
    if args.server in ("sync", "bridge", "relay", "inline", "direct", "handoff"):
        _serve_sync(args)
    elif args.server == "uvloop":
        import uvloop

        uvloop.run(_serve_aio(args))
    else:
        asyncio.run(_serve_aio(args))
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
