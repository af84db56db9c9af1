"""The bridge between a thread-pool grpc.server and coroutine handlers, with a fake grpc context:
results and aborts reach the gRPC thread, a call that ends for the client cancels its handler,
and streams are bounded by the window both ways."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import pytest

from podium.server.grpc._errors import unhandled_status
from podium.server.grpc.bridge import WINDOW, Bridge


class Aborted(Exception):
    pass


class FakeContext:
    """What a sync grpc.server gives a handler, as far as the bridge uses it."""

    def __init__(self) -> None:
        self.callbacks: list[Callable[[], None]] = []
        self.aborted: tuple[grpc.StatusCode, str] | None = None

    def add_callback(self, callback: Callable[[], None]) -> bool:
        self.callbacks.append(callback)
        return True

    def end(self) -> None:
        """The RPC ends for the client (grpc runs the callbacks, from its own thread)."""
        for callback in self.callbacks:
            callback()

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.aborted = (code, details)
        raise Aborted(details)

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return (("x-key", "v"),)

    def peer(self) -> str:
        return "ipv4:127.0.0.1:1"


@pytest.fixture
async def bridge() -> AsyncIterator[Bridge]:
    readers = ThreadPoolExecutor(4)
    try:
        yield Bridge(asyncio.get_running_loop(), readers, internals=None, status=unhandled_status)
    finally:
        readers.shutdown(wait=False, cancel_futures=True)


def unary(behavior: Any) -> grpc.RpcMethodHandler:
    return grpc.unary_unary_rpc_method_handler(behavior)


async def in_thread(fn: Callable[[], Any]) -> Any:
    return await asyncio.to_thread(fn)


@pytest.mark.anyio
async def test_unary_runs_on_the_loop_and_returns_to_the_thread(bridge: Bridge) -> None:
    loop_thread = threading.get_ident()
    seen: dict[str, Any] = {}

    async def handler(request: Any, context: Any) -> Any:
        seen["thread"] = threading.get_ident()
        seen["metadata"] = context.invocation_metadata()
        await asyncio.sleep(0)  # a real suspension
        return request * 2

    serve = bridge.handler(unary(handler)).unary_unary
    assert await in_thread(lambda: serve(21, FakeContext())) == 42
    assert seen == {"thread": loop_thread, "metadata": (("x-key", "v"),)}


@pytest.mark.anyio
async def test_an_abort_on_the_loop_aborts_in_the_thread(bridge: Bridge) -> None:
    async def handler(request: Any, context: Any) -> Any:
        await context.abort(grpc.StatusCode.NOT_FOUND, "model 'x' is not known")

    serve = bridge.handler(unary(handler)).unary_unary
    context = FakeContext()
    with pytest.raises(Aborted):
        await in_thread(lambda: serve(1, context))
    assert context.aborted == (grpc.StatusCode.NOT_FOUND, "model 'x' is not known")


@pytest.mark.anyio
async def test_a_call_that_ends_for_the_client_cancels_its_handler(bridge: Bridge) -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def handler(request: Any, context: Any) -> Any:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    serve = bridge.handler(unary(handler)).unary_unary
    context = FakeContext()
    thread = asyncio.ensure_future(in_thread(lambda: serve(1, context)))
    await started.wait()
    await in_thread(context.end)  # grpc's termination callback, from another thread
    await asyncio.wait_for(cancelled.wait(), 5)
    with pytest.raises(Aborted):
        await asyncio.wait_for(thread, 5)  # the thread is let go too
    assert context.aborted is not None and context.aborted[0] is grpc.StatusCode.CANCELLED


@pytest.mark.anyio
async def test_a_response_stream_holds_at_most_a_window_of_untaken_messages(
    bridge: Bridge,
) -> None:
    written: list[int] = []

    async def handler(request: Any, context: Any) -> AsyncIterator[int]:
        for i in range(request):
            written.append(i)
            yield i

    serve = bridge.handler(grpc.unary_stream_rpc_method_handler(handler)).unary_stream
    items: Iterator[int] = iter(())

    def start() -> None:
        nonlocal items
        items = serve(WINDOW * 4, FakeContext())
        next(items)  # starts the handler; one message taken

    await in_thread(start)
    for _ in range(50):
        await asyncio.sleep(0.01)
    # Nothing more is taken: the handler stops once the window is full.
    assert len(written) <= WINDOW + 2
    rest = await in_thread(lambda: list(items))
    assert rest == list(range(1, WINDOW * 4))
    assert written == list(range(WINDOW * 4))


@pytest.mark.anyio
async def test_write_and_failure_on_a_stream(bridge: Bridge) -> None:
    async def handler(request: Any, context: Any) -> None:
        await context.write("a")
        await context.write("b")
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "bad second request")

    serve = bridge.handler(grpc.unary_stream_rpc_method_handler(handler)).unary_stream
    context = FakeContext()
    got: list[str] = []

    def read() -> None:
        for item in serve(None, context):
            got.append(item)

    with pytest.raises(Aborted):
        await in_thread(read)
    assert got == ["a", "b"]
    assert context.aborted == (grpc.StatusCode.INVALID_ARGUMENT, "bad second request")


@pytest.mark.anyio
async def test_request_streams_are_read_ahead_by_at_most_a_window(bridge: Bridge) -> None:
    pulled: list[int] = []
    release = threading.Event()

    def requests() -> Iterator[int]:
        for i in range(WINDOW * 3):
            pulled.append(i)
            yield i

    async def handler(request_iterator: Any, context: Any) -> AsyncIterator[int]:
        async for message in request_iterator:
            if message == 0:
                await asyncio.to_thread(release.wait)  # the handler is slow on the first one
            yield message

    serve = bridge.handler(grpc.stream_stream_rpc_method_handler(handler)).stream_stream
    answers = asyncio.ensure_future(in_thread(lambda: list(serve(requests(), FakeContext()))))
    for _ in range(50):
        await asyncio.sleep(0.01)
    assert len(pulled) <= WINDOW + 2  # the reader thread waits for room
    release.set()
    assert await asyncio.wait_for(answers, 10) == list(range(WINDOW * 3))
