"""Serving Podium's coroutine handlers from the threads of a synchronous ``grpc.server``.

grpcio's thread-pool server moves a unary call through its C core about twice as fast as
``grpc.aio`` does (bench/RESULTS.md, section 4), but the data plane, the schedulers and async
models live on one event loop. The bridge keeps both: every handler is still written once, as a
coroutine against a small context (:class:`LoopContext`, the part of ``grpc.aio.ServicerContext``
Podium's handlers use), and :meth:`Bridge.handler` turns its ``grpc.aio``-style method handler
into one for grpc's threads that runs the coroutine on the loop.

A unary call is *relayed* through no pool thread at all: grpc's polling thread asks for the
request message when the call arrives, parses it when it has, and hands it to the loop with one
``call_soon_threadsafe``; the loop runs the handler in a task and queues its outcome for one
sender thread, which sends the answer and the status together in one batch, exactly as grpc does
at the end of a unary call. For grpc the method is a non-blocking bidirectional one run by an
inline executor (the same on the wire: one message each way, then the status). This uses grpcio
internals (:mod:`._internals`, checked at start-up); where they are not as expected, or with
``relay=False``, unary calls take the public, blocking way: a pool thread waits for the request,
hands it to the loop, and waits on a plain lock for the answer. Relaying saves the pool thread's
two waits per call, and sending from a thread of its own keeps the loop from handing the GIL to
grpc's polling thread on every call: 1.7-1.8x the calls per second (bench/RESULTS.md,
sections 5 and 9).

Streams are relayed the same way and hold no thread while open. A response stream leaves
through an :class:`_Outbox`: one send in flight at a time, the first started by the sender
thread, each next one by grpc's polling thread as the previous completes, and the status after
the last. A request stream arrives through an :class:`_Inbox`, whose messages grpc's polling
thread receives one after another. Both are bounded by a window of :data:`WINDOW` messages:
the loop waits while that many have not left, and no more are read ahead of the handler (HTTP/2
flow control takes it back to the client). The blocking way (the fallback) moves stream messages
through lock-free hand-offs with the same window, a pool thread per open stream (and one more to
read a request stream); a thread is woken or the loop called only when the other side waits.

Cancellation is the same as on ``grpc.aio``: when the RPC ends for the client (cancelled,
connection dropped, deadline), grpc runs the call's callback and the bridge cancels the handler's
task, so the model's work is cancelled exactly as for an HTTP disconnect.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import logging
import queue
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc

from ...errors import InvalidInput, PodiumError
from . import _internals
from ._errors import status_of
from ._internals import INLINE, Internals

__all__ = ["WINDOW", "Bridge", "LoopContext"]

logger = logging.getLogger("podium.grpc")

#: Messages that may wait between the loop and a gRPC thread, either way, on one stream.
WINDOW = 16

_END = object()


_INTERNALS = _internals.load()


class _Abort(grpc.aio.AbortError):
    """How :meth:`LoopContext.abort` ends a handler: the gRPC thread sets the status."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


class LoopContext:
    """What a coroutine handler sees of a call served by a gRPC thread.

    It offers the methods of ``grpc.aio.ServicerContext`` that Podium's handlers use, with the
    same meaning; the ones that touch the call itself are thread-safe in grpcio and are called
    directly.
    """

    __slots__ = ("_context", "_call", "_done_callbacks")

    def __init__(self, context: grpc.ServicerContext, call: _Call) -> None:
        self._context = context
        self._call = call
        self._done_callbacks: list[Callable[[Any], None]] | None = None

    def invocation_metadata(self) -> Any:
        return self._context.invocation_metadata()

    def peer(self) -> str:
        return self._context.peer()

    async def abort(self, code: grpc.StatusCode, details: str = "") -> None:
        raise _Abort(code, details)

    async def send_initial_metadata(self, metadata: Any) -> None:
        self._context.send_initial_metadata(metadata)

    def set_trailing_metadata(self, metadata: Any) -> None:
        self._context.set_trailing_metadata(metadata)

    async def write(self, message: Any) -> None:
        await self._call.put(message)

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        """Call ``callback(self)`` on the loop once the call has ended, for whatever reason."""
        if self._done_callbacks is None:
            self._done_callbacks = []
        if self._call.ended:
            self._call.loop.call_soon(callback, self)
        else:
            self._done_callbacks.append(callback)

    def _ended(self) -> None:
        for callback in self._done_callbacks or ():
            callback(self)


class _Call:
    """One call's state, shared by its gRPC thread and the loop."""

    __slots__ = (
        "loop",
        "task",
        "ended",
        "gone",
        "result",
        "error",
        "_done",
        "_items",
        "_written",
        "_taken",
        "_waiting",
        "_space",
        "context",
        "_relay",
        "_outbox",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        context: grpc.ServicerContext,
        relay: _Relay | None = None,
        *,
        waits: bool = True,
    ) -> None:
        self.loop = loop
        self.task: asyncio.Task[Any] | None = None
        self.ended = False  # the handler finished (on the loop)
        self.gone = False  # the RPC ended for the client before the handler did
        self.result: Any = None
        self.error: BaseException | None = None
        self._done: threading.Lock | None = None
        if relay is None and waits:  # the gRPC thread waits on this lock for the loop
            self._done = threading.Lock()
            self._done.acquire()
        self._items: queue.SimpleQueue[Any] | None = None
        self._written = 0  # messages put (loop side)
        self._taken = 0  # messages taken (thread side)
        self._waiting = False  # the loop waits for room in the window
        self._space: asyncio.Future[None] | None = None
        self.context = LoopContext(context, self)
        self._relay = relay  # a relayed unary call: the sender thread ends it (see _finish)
        self._outbox: _Outbox | None = None  # a relayed stream's way out

    # -- the gRPC thread -------------------------------------------------------------------

    def on_rpc_end(self) -> None:
        """grpc's termination callback (any thread): cancel the handler if it still runs."""
        if not self.ended:
            self.gone = True
            self.loop.call_soon_threadsafe(self._cancel)

    def wait(self) -> Any:
        """Block until the handler ends; its result, or raise as a sync handler would."""
        assert self._done is not None
        self._done.acquire()
        return self._outcome()

    def _outcome(self) -> Any:
        error = self.error
        if error is None:
            return self.result
        if isinstance(error, _Abort):
            self.context._context.abort(error.code, error.details)  # raises
        if isinstance(error, asyncio.CancelledError):
            # The client is gone (or the server stops): nobody reads this status.
            self.context._context.abort(grpc.StatusCode.CANCELLED, "the call was cancelled")
        raise error

    def items(self) -> Iterator[Any]:
        """The messages the handler writes, as a blocking iterator for grpc."""
        items = self._items
        assert items is not None
        while True:
            item = items.get()
            if item is _END:
                self._outcome()  # raises for a failed handler
                return
            self.took_one()
            yield item

    def took_one(self) -> None:
        """A message has left (any thread but the loop's)."""
        self._taken += 1
        # Wake a loop waiting for room only once half the window is free: one wake-up per
        # WINDOW // 2 messages, not one per message, when the client is the slower side.
        if self._waiting and self._written - self._taken <= WINDOW // 2:
            self._waiting = False
            self.loop.call_soon_threadsafe(self._wake)

    # -- the loop --------------------------------------------------------------------------

    def start_with(self, behavior: Callable[..., Any], request: Any) -> None:
        """Start ``behavior(request, context)``, made here on the loop (a streaming one when
        the call has an outbox)."""
        if self.gone:
            self._finish(None, asyncio.CancelledError())
            return
        handler = behavior(request, self.context)
        self.start(handler if self._outbox is None else self.run_stream(handler))

    def start(self, coroutine: Any) -> None:
        if self.gone:
            coroutine.close()
            self._finish(None, asyncio.CancelledError())
            return
        self.task = self.loop.create_task(self._run(coroutine))

    async def _run(self, coroutine: Any) -> None:
        try:
            result = await coroutine
        except BaseException as exc:  # handed to the gRPC thread, which raises it there
            self._finish(None, exc)
            if not isinstance(exc, Exception | asyncio.CancelledError):
                raise
        else:
            self._finish(result, None)

    async def run_stream(self, agen_or_coroutine: Any) -> None:
        """Run a streaming handler: an async generator's items are written one by one."""
        if inspect.isasyncgen(agen_or_coroutine):
            try:
                async for item in agen_or_coroutine:
                    await self.put(item)
            finally:
                await agen_or_coroutine.aclose()
        else:
            await agen_or_coroutine

    def _finish(self, result: Any, error: BaseException | None) -> None:
        self.result = result
        self.error = error
        self.ended = True
        self.context._ended()
        if self._relay is not None:
            self._relay.finish(self.context._context, result, error)
            return
        if self._outbox is not None:
            self._outbox.finish(error)
            return
        if self._items is not None:
            self._items.put(_END)
        assert self._done is not None
        self._done.release()

    def _cancel(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()

    def open_stream(self) -> None:
        self._items = queue.SimpleQueue()

    async def put(self, message: Any) -> None:
        """Hand one message on (to the gRPC thread, or to the outbox of a relayed stream);
        wait while :data:`WINDOW` have not left."""
        if self._written - self._taken >= WINDOW:
            self._space = self.loop.create_future()
            self._waiting = True
            if self._written - self._taken >= WINDOW:  # still full: the thread will wake us
                await self._space
            else:
                self._waiting = False
        self._written += 1
        if self._outbox is not None:
            self._outbox.put(message)
            return
        assert self._items is not None
        self._items.put(message)

    def _wake(self) -> None:
        space = self._space
        if space is not None and not space.done():
            space.set_result(None)


def _set_status(context: grpc.ServicerContext, error: BaseException | None) -> None:
    """The status a handler's outcome ends its call with, as grpc gives a synchronous handler
    (nothing for a success: OK)."""
    if error is None:
        return
    if isinstance(error, _Abort):
        context.set_code(error.code)
        context.set_details(error.details)
    elif isinstance(error, PodiumError):  # not turned into a status by the handler itself
        code, details = status_of(error)
        context.set_code(code)
        context.set_details(details)
    elif isinstance(error, asyncio.CancelledError):
        # The client is gone (or the server stops): nobody reads this status.
        context.set_code(grpc.StatusCode.CANCELLED)
        context.set_details("the call was cancelled")
    else:  # a bug in a handler: what grpc says for an exception from a sync handler
        logger.error("gRPC handler failed", exc_info=error)
        context.set_code(grpc.StatusCode.UNKNOWN)
        context.set_details(f"Exception calling application: {error}")


def _serialize_failed(context: grpc.ServicerContext) -> None:
    logger.exception("failed to serialize a gRPC response")
    context.set_code(grpc.StatusCode.INTERNAL)
    context.set_details("Failed to serialize response!")


class _Relay:
    """How a relayed unary call of one method ends: :meth:`finish` hands the outcome to the
    sender thread, which serializes the answer with the method's own serializer and sends it with
    the status, or sends the status alone for an abort or a failure, with the codes and details a
    synchronous handler would get from grpc."""

    __slots__ = ("render", "sender")

    def __init__(self, render: Callable[[Any], bytes] | None, sender: _Sender) -> None:
        self.render = render
        self.sender = sender

    def finish(
        self, context: grpc.ServicerContext, result: Any, error: BaseException | None
    ) -> None:
        """On the loop: the handler has ended."""
        self.sender.queue.put((self.end, context, result, error))

    def end(self, context: grpc.ServicerContext, result: Any, error: BaseException | None) -> None:
        """On the sender thread: end the call."""
        payload: bytes | None = None
        if error is None:
            try:
                payload = result if self.render is None else self.render(result)
            except Exception:
                _serialize_failed(context)
        _set_status(context, error)
        self.sender.internals.send_status(context, payload)


class _Outbox:
    """A relayed stream's messages on their way out, one send at a time. The sender thread
    starts a send when the stream was idle; from then on grpc's polling thread starts the next
    one as each completes, so a busy stream costs no thread wake-up per message. The status
    goes after the last message."""

    __slots__ = ("call", "context", "render", "sender", "_lock", "_queue", "_busy")

    def __init__(
        self,
        call: _Call,
        context: grpc.ServicerContext,
        render: Callable[[Any], bytes] | None,
        sender: _Sender,
    ) -> None:
        self.call = call
        self.context = context
        self.render = render
        self.sender = sender
        self._lock = threading.Lock()
        self._queue: collections.deque[Any] = collections.deque()
        self._busy = False  # a send is in flight, or the sender thread will start one

    def put(self, message: Any) -> None:
        """On the loop: one more message."""
        self._add(message)

    def finish(self, error: BaseException | None) -> None:
        """On the loop: the handler has ended; the status follows the messages."""
        self._add(_Ending(error))

    def _add(self, item: Any) -> None:
        with self._lock:
            self._queue.append(item)
            if self._busy:
                return
            self._busy = True
        self.sender.queue.put((self.pump,))

    def pump(self) -> None:
        """Send the next message, or the status (the sender thread or grpc's polling thread)."""
        with self._lock:
            if not self._queue:
                self._busy = False
                return
            item = self._queue.popleft()
        internals = self.sender.internals
        if isinstance(item, _Ending):
            self._close()
            _set_status(self.context, item.error)
            internals.send_status(self.context, None)
            return
        try:
            payload = item if self.render is None else self.render(item)
        except Exception:
            self._close()
            _serialize_failed(self.context)
            internals.send_status(self.context, None)
            return
        if not internals.send(self.context, payload, self._sent):
            self._close()  # the call is over: its handler is being cancelled

    def _sent(self, still_open: bool) -> None:
        self.call.took_one()
        if still_open:
            self.pump()
        else:
            self._close()

    def _close(self) -> None:
        with self._lock:
            self._queue.clear()
            self._busy = True  # nothing is sent any more


class _Ending:
    __slots__ = ("error",)

    def __init__(self, error: BaseException | None) -> None:
        self.error = error


class _Requests:
    """A request stream as an async iterator over a buffer that another thread fills
    (:meth:`_push`); the loop is woken only when the handler waits for a message."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._buffer: collections.deque[Any] = collections.deque()
        self._arrived: asyncio.Future[None] | None = None
        self._waiting = False

    def _push(self, entry: Any) -> None:
        """A message, :data:`_END` or a :class:`_Failed` (any thread but the loop's)."""
        self._buffer.append(entry)
        if self._waiting:
            self._waiting = False
            self._loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        arrived = self._arrived
        if arrived is not None and not arrived.done():
            arrived.set_result(None)

    def __aiter__(self) -> AsyncIterator[Any]:
        return self

    async def __anext__(self) -> Any:
        return await self._take()

    async def _take(self) -> Any:
        """The next message; raises at the end (and ever after) or for a failed stream."""
        if not self._buffer:
            self._arrived = self._loop.create_future()
            self._waiting = True
            if not self._buffer:
                await self._arrived
            else:
                self._waiting = False
        message = self._buffer.popleft()
        if message is _END:
            self._buffer.appendleft(_END)
            raise StopAsyncIteration
        if isinstance(message, _Failed):
            self._buffer.appendleft(message)
            if isinstance(message.exc, grpc.RpcError):  # the call ended under the handler
                raise asyncio.CancelledError()
            raise message.exc
        return message


class _Inbox(_Requests):
    """A relayed call's request stream as an async iterator: grpc's polling thread receives
    one message after another, up to :data:`WINDOW` ahead of the handler (back-pressure reaches
    the client through HTTP/2 flow control); the sender thread asks again once the handler has
    read half of them."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        context: grpc.ServicerContext,
        parse: Callable[[bytes], Any] | None,
        sender: _Sender,
    ) -> None:
        super().__init__(loop)
        self._context = context
        self._parse = parse
        self._sender = sender
        self._lock = threading.Lock()
        self._paused = False

    def receive(self) -> None:
        """Ask for the next message (grpc's polling thread, or the sender thread)."""
        self._sender.internals.receive_next(
            self._context, self._parse, self._on_message, self._on_end, self._on_unparsable
        )

    def _on_unparsable(self, exc: Exception) -> None:
        # The handler gets InvalidInput for this message, once, and may read on.
        self._on_message(_Unparsable(InvalidInput(_internals.unparsable(exc))))

    def _on_message(self, message: Any) -> None:
        self._push(message)
        with self._lock:
            if len(self._buffer) >= WINDOW:
                self._paused = True
                return
        self.receive()

    def _on_end(self, error: BaseException | None) -> None:
        self._push(_END if error is None else _Failed(error))

    async def __anext__(self) -> Any:
        message = await self._take()
        with self._lock:
            resume = self._paused and len(self._buffer) <= WINDOW // 2
            if resume:
                self._paused = False
        if resume:
            self._sender.queue.put((self.receive,))
        if isinstance(message, _Unparsable):
            raise message.exc
        return message


class _Unparsable:
    __slots__ = ("exc",)

    def __init__(self, exc: InvalidInput) -> None:
        self.exc = exc


class _Sender:
    """The thread that ends relayed unary calls and starts the sends of idle relayed streams, in
    the order they were handed to it.

    Sending enters grpc's C core, which lets go of the GIL; done on the loop, every call would
    hand the GIL to grpc's polling thread and wait to get it back, a thread switch per call on
    the loop's critical path (half the throughput, bench/RESULTS.md section 9). The loop only
    queues the work: ``(function, *args)``.
    """

    def __init__(self, internals: Internals) -> None:
        self.internals = internals
        self.queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="podium-grpc-send", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            item = self.queue.get()
            if item is None:
                return
            try:
                item[0](*item[1:])
            except Exception:  # that call is lost; the sender must go on for the others
                logger.exception("failed to end a gRPC call")

    def close(self) -> None:
        """Stop once everything queued so far is done."""
        self.queue.put(None)
        self._thread.join(timeout=5)


class _RequestReader(_Requests):
    """A client's request stream, read by a thread of its own, as an async iterator (the
    blocking way).

    grpc's request iterator blocks; the reader thread pulls at most :data:`WINDOW` messages
    ahead of the handler (back-pressure reaches the client through HTTP/2 flow control).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, requests: Iterator[Any]) -> None:
        super().__init__(loop)
        self._requests = requests
        self._room = threading.Semaphore(WINDOW)
        self._closed = False

    def read(self) -> None:
        """The reader thread's loop."""
        try:
            for message in self._requests:
                self._room.acquire()
                if self._closed:
                    return
                self._push(message)
            self._push(_END)
        except BaseException as exc:  # the call was cancelled, or a message failed to parse
            self._push(_Failed(exc))

    def close(self) -> None:
        self._closed = True
        self._room.release(WINDOW)

    async def __anext__(self) -> Any:
        message = await self._take()
        self._room.release()
        return message


class _Failed:
    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class Bridge:
    """Turns ``grpc.aio``-style method handlers into handlers for a thread-pool server whose
    coroutines run on ``loop``. Request streams are read by threads of ``readers``; streaming
    calls are served by the server's own pool. Unary calls are relayed (see the module's
    docstring) with ``internals``: by default grpcio's own, when they are as expected
    (:func:`._internals.load`); ``relay=False`` serves them the public, blocking way."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        readers: ThreadPoolExecutor,
        *,
        relay: bool = True,
        internals: Internals | None = None,
    ) -> None:
        self.loop = loop
        self.readers = readers
        self.internals = (internals or _INTERNALS) if relay else None
        self._sender: _Sender | None = None
        if self.internals is not None:
            self._sender = _Sender(self.internals)

    def close(self) -> None:
        """Stop the sender thread (after the server has stopped: every call has ended)."""
        if self._sender is not None:
            self._sender.close()
            self._sender = None

    def handler(self, method: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        """The same RPC (its (de)serializers unchanged), served through the bridge."""
        parse, render = method.request_deserializer, method.response_serializer
        if self.internals is not None and method.response_streaming:
            # Registered as a non-blocking bidirectional method on the inline executor, like a
            # relayed unary call: no thread is held while the stream is open.
            behavior = method.stream_stream if method.request_streaming else method.unary_stream
            return grpc.stream_stream_rpc_method_handler(
                self._relayed(
                    behavior,
                    self.internals,
                    parse,
                    render,
                    stream=True,
                    requests=method.request_streaming,
                )
            )
        if method.request_streaming and method.response_streaming:
            return grpc.stream_stream_rpc_method_handler(
                self._streaming(method.stream_stream, requests_streamed=True),
                request_deserializer=parse,
                response_serializer=render,
            )
        if method.response_streaming:
            return grpc.unary_stream_rpc_method_handler(
                self._streaming(method.unary_stream, requests_streamed=False),
                request_deserializer=parse,
                response_serializer=render,
            )
        if method.request_streaming:
            raise ValueError("stream-unary methods are not bridged (Podium serves none)")
        if self.internals is not None:
            # Registered as bidirectional (one message each way, then the status: the same on
            # the wire), because grpc lets only streaming methods return before their call has
            # ended, and reads no request for a method whose requests stream.
            return grpc.stream_stream_rpc_method_handler(
                self._relayed(method.unary_unary, self.internals, parse, render)
            )
        return grpc.unary_unary_rpc_method_handler(
            self._unary(method.unary_unary), request_deserializer=parse, response_serializer=render
        )

    def _relayed(
        self,
        behavior: Callable[..., Any],
        internals: Internals,
        parse: Callable[[bytes], Any] | None,
        render: Callable[[Any], bytes] | None,
        *,
        stream: bool = False,
        requests: bool = False,
    ) -> Callable[[Any, grpc.ServicerContext, Any], None]:
        """A relayed method: unary, or with a response ``stream`` (and a request stream)."""
        loop = self.loop
        sender = self._sender
        assert sender is not None
        relay = None if stream else _Relay(render, sender)

        def serve(_requests: Any, context: grpc.ServicerContext, _send: Any) -> None:
            # On grpc's polling thread, as the call arrives: nothing here may block.
            call = _Call(loop, context, relay, waits=False)
            if stream:
                call._outbox = _Outbox(call, context, render, sender)
            if not context.add_callback(call.on_rpc_end):
                return  # it ended already
            if requests:  # the handler starts now and reads the requests as they come
                inbox = _Inbox(loop, context, parse, sender)
                loop.call_soon_threadsafe(call.start_with, behavior, inbox)
                inbox.receive()
                return

            def deliver(request: Any) -> None:  # the polling thread again, with the request
                loop.call_soon_threadsafe(call.start_with, behavior, request)

            internals.receive(context, parse, deliver)

        serve.experimental_non_blocking = True  # type: ignore[attr-defined]
        serve.experimental_thread_pool = INLINE  # type: ignore[attr-defined]
        return serve

    def _unary(self, behavior: Callable[..., Any]) -> Callable[[Any, grpc.ServicerContext], Any]:
        loop = self.loop

        def serve(request: Any, context: grpc.ServicerContext) -> Any:
            call = _Call(loop, context)
            if not context.add_callback(call.on_rpc_end):
                call.gone = True  # it ended already
            loop.call_soon_threadsafe(call.start, behavior(request, call.context))
            return call.wait()

        return serve

    def _streaming(
        self, behavior: Callable[..., Any], *, requests_streamed: bool
    ) -> Callable[[Any, grpc.ServicerContext], Iterator[Any]]:
        loop = self.loop

        def serve(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            call = _Call(loop, context)
            call.open_stream()
            reader: _RequestReader | None = None
            if requests_streamed:
                reader = _RequestReader(loop, request)
                request = reader
            if not context.add_callback(call.on_rpc_end):
                call.gone = True
            handler = behavior(request, call.context)
            loop.call_soon_threadsafe(call.start, call.run_stream(handler))
            if reader is not None:
                self.readers.submit(reader.read)
            try:
                yield from call.items()
            finally:
                if reader is not None:
                    reader.close()
                if not call.ended:  # grpc stopped reading (the client left): stop the handler
                    call.on_rpc_end()

        return serve
