"""The bridge itself: :meth:`Bridge.handler` turns a ``grpc.aio``-style method handler into one
for grpc's threads, relayed (:mod:`._relay`) or the blocking way (the package's docstring says
both)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc

from ._context import Call, Status
from ._internals import INLINE, Internals
from ._relay import Inbox, Outbox, Relay, Sender
from ._streams import RequestReader

__all__ = ["Bridge"]


class Bridge:
    """Turns ``grpc.aio``-style method handlers into handlers for a thread-pool server whose
    coroutines run on ``loop``.

    With ``internals`` (:func:`~._internals.load`, vetted by :func:`~._mode.check`), every call
    is relayed and holds no thread; with ``None``, calls take the public, blocking way: the
    server's pool serves them, and threads of ``readers`` read request streams. A call whose
    handler raises ends with ``status(error)`` either way.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        readers: ThreadPoolExecutor,
        *,
        internals: Internals | None,
        status: Status,
    ) -> None:
        self.loop = loop
        self.readers = readers
        self.internals = internals
        self.status = status
        self._sender: Sender | None = None
        if internals is not None:
            self._sender = Sender(internals, status)

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
        relay = None if stream else Relay(render, sender)

        def serve(_requests: Any, context: grpc.ServicerContext, _send: Any) -> None:
            # On grpc's polling thread, as the call arrives: nothing here may block.
            call = Call(loop, context, relay, waits=False)
            if stream:
                call._outbox = Outbox(call, context, render, sender)
            if not context.add_callback(call.on_rpc_end):
                return  # it ended already
            if requests:  # the handler starts now and reads the requests as they come
                inbox = Inbox(loop, context, parse, sender)
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
        loop, status = self.loop, self.status

        def serve(request: Any, context: grpc.ServicerContext) -> Any:
            call = Call(loop, context)
            if not context.add_callback(call.on_rpc_end):
                call.gone = True  # it ended already
            loop.call_soon_threadsafe(call.start, behavior(request, call.context))
            return call.wait(status)

        return serve

    def _streaming(
        self, behavior: Callable[..., Any], *, requests_streamed: bool
    ) -> Callable[[Any, grpc.ServicerContext], Iterator[Any]]:
        loop, status = self.loop, self.status

        def serve(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            call = Call(loop, context)
            call.open_stream()
            reader: RequestReader | None = None
            if requests_streamed:
                reader = RequestReader(loop, request)
                request = reader
            if not context.add_callback(call.on_rpc_end):
                call.gone = True
            handler = behavior(request, call.context)
            loop.call_soon_threadsafe(call.start, call.run_stream(handler))
            if reader is not None:
                self.readers.submit(reader.read)
            try:
                yield from call.items(status)
            finally:
                if reader is not None:
                    reader.close()
                if not call.ended:  # grpc stopped reading (the client left): stop the handler
                    call.on_rpc_end()

        return serve
