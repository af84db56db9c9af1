"""The bridge itself: :meth:`Bridge.handler` turns a ``grpc.aio``-style method handler into one
that grpc's polling thread relays to the loop (:mod:`._relay`; the package's docstring says how)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import grpc

from ._context import Status
from ._internals import INLINE, Internals
from ._relay import Relay, Sender
from ._serving import Method, Serving, start

__all__ = ["Bridge"]


class Bridge:
    """Turns ``grpc.aio``-style method handlers into handlers for a ``grpc.server`` whose
    coroutines run on ``loop``, every call relayed through ``internals`` (:func:`~._internals.load`,
    vetted by :func:`~._mode.check`) and holding no thread. A call whose handler raises ends with
    ``status(error)``.
    """

    def __init__(
        self, loop: asyncio.AbstractEventLoop, *, internals: Internals, status: Status
    ) -> None:
        self.loop = loop
        self.internals = internals
        self.status = status
        self._sender: Sender | None = Sender(internals, status)
        self.serving: Serving | None = None  # the serving loop, once started

    def start(self, server: grpc.Server) -> None:
        """Start ``server`` (a ``grpc.server`` with this bridge's handlers) served by the
        relay's own loop (:mod:`._serving`): a relayed method's handler is served only there."""
        assert self._sender is not None
        self.serving = start(server, self.internals, self._sender)

    def close(self) -> None:
        """Stop the sender thread (after the server has stopped: every call has ended)."""
        if self._sender is not None:
            self._sender.close()
            self._sender = None

    def handler(self, method: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        """The same RPC (its (de)serializers unchanged), relayed.

        For grpc every method is a non-blocking bidirectional one on the inline executor, which
        carries the relayed :class:`~._serving.Method`: the relay's serving loop finds it through
        grpc's generic handlers and serves its calls itself (reading no request for a method
        whose requests stream). On the wire nothing changes (a unary call is one message each
        way, then the status).
        """
        if method.request_streaming and not method.response_streaming:
            raise ValueError("stream-unary methods are not bridged (Podium serves none)")
        if method.response_streaming:
            behavior = method.stream_stream if method.request_streaming else method.unary_stream
        else:
            behavior = method.unary_unary
        return grpc.stream_stream_rpc_method_handler(
            self._relayed(
                behavior,
                method.request_deserializer,
                method.response_serializer,
                stream=method.response_streaming,
                requests=method.request_streaming,
            )
        )

    def _relayed(
        self,
        behavior: Callable[..., Any],
        parse: Callable[[bytes], Any] | None,
        render: Callable[[Any], bytes] | None,
        *,
        stream: bool,
        requests: bool,
    ) -> Callable[[Any, grpc.ServicerContext, Any], None]:
        """A relayed method: unary, or with a response ``stream`` (and a request stream), served
        by the relay's own loop (._serving), never by grpc's."""
        sender = self._sender
        assert sender is not None

        def serve(_requests: Any, context: grpc.ServicerContext, _send: Any) -> None:
            # Only a server not started by Bridge.start gets here: end the call, never hang.
            context.abort(grpc.StatusCode.INTERNAL, "a relayed call reached grpc's loop")

        if stream:
            method = Method(
                self.loop,
                behavior,
                parse,
                relay=None,
                render=render,
                sender=sender,
                requests=requests,
            )
        else:
            method = Method(self.loop, behavior, parse, relay=Relay(render, sender))
        serve.relayed = method  # type: ignore[attr-defined]
        serve.experimental_non_blocking = True  # type: ignore[attr-defined]
        serve.experimental_thread_pool = INLINE  # type: ignore[attr-defined]
        return serve
