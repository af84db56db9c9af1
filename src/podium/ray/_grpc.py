"""OIP's ``inference.GRPCInferenceService`` through Ray Serve's gRPC proxy, served by Podium's
own gRPC front end in the ingress.

Serve's gRPC proxy takes import paths of ``add_..._to_server`` functions
(``gRPCOptions.grpc_servicer_functions``): :func:`add_GRPCInferenceServiceServicer_to_server`
registers the service with Podium's message classes (what the proxy parses requests with; Podium's
private descriptor pool, so tritonclient or mlserver in the same process never clash). The proxy
then calls the application's ingress by method name (``ModelInfer`` ...) with the parsed message
and a ``RayServegRPCContext``; the ingress hands both to :class:`GrpcFront`, which runs the very
handler of ``podium serve``'s gRPC listener (``OipService``, over the ingress's remote data plane)
with a context that carries what it sets (status, details, trailing metadata) back to Serve's.

What Serve's proxy does not carry, and so is not served here: Podium's own gRPC listener's
limits, health and reflection services (Serve answers its own ``RayServeAPIService``), the
shared memory RPCs (replicas do not share the client's host), and the TorchServe gRPC services
(they would need a second set of method names on the same ingress; not done).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from ..dataplane import DataPlane
from ..server.grpc import OipService

__all__ = ["OIP_SERVICER", "GrpcFront", "add_GRPCInferenceServiceServicer_to_server"]

#: What ``gRPCOptions.grpc_servicer_functions`` names to serve OIP gRPC (docs/ray.md).
OIP_SERVICER = "podium.ray:add_GRPCInferenceServiceServicer_to_server"


def add_GRPCInferenceServiceServicer_to_server(servicer: Any, server: Any) -> None:  # noqa: N802
    """Register ``inference.GRPCInferenceService`` on ``server`` (Serve's gRPC proxy, which
    keeps each method's request parser and routes the call to the ingress): the methods and
    messages of Podium's own service. ``servicer`` is unused (Serve passes a placeholder)."""
    service = OipService(DataPlane()).service()
    # Requests cross to the ingress as their bytes, parsed there (GrpcFront): the proxy would
    # pickle a parsed message, and the classes of Podium's private pool are no module's names.
    methods = {
        name: handler._replace(request_deserializer=None)
        for name, handler in service.methods.items()
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service.name, methods),))


class _Aborted(grpc.aio.AbortError):
    """The handler ended the call with a status (set on Serve's context already); an
    ``AbortError``, which Podium's handlers let through as grpc's own."""


class _Context:
    """What Podium's gRPC handlers use of a ``grpc.aio`` servicer context, over Serve's
    ``RayServegRPCContext``: metadata in, status and trailing metadata out, and the stream's
    ``write``."""

    def __init__(self, serve_context: Any, write: Callable[[Any], Any] | None = None) -> None:
        self._serve = serve_context
        self._write = write

    def invocation_metadata(self) -> Any:
        return self._serve.invocation_metadata()

    def peer(self) -> Any:
        return self._serve.peer()

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        """Not told here: a client that leaves cancels the task (Serve's cancellation)."""

    def set_trailing_metadata(self, metadata: Any) -> None:
        self._serve.set_trailing_metadata(list(metadata))

    async def abort(self, code: Any, details: str = "") -> None:
        self._serve.set_code(code)
        self._serve.set_details(details)
        raise _Aborted(details)

    async def write(self, message: Any) -> None:
        if self._write is None:
            raise RuntimeError("write() on a unary call")
        await self._write(message)


class GrpcFront:
    """``podium serve``'s OIP gRPC handlers over ``plane``, called as Serve's proxy calls the
    ingress."""

    def __init__(self, plane: DataPlane) -> None:
        self._methods = OipService(plane).service().methods

    async def unary(self, method: str, message: Any, serve_context: Any) -> Any:
        """The answer of ``method`` to ``message``; a failure raises with its status set on
        ``serve_context`` (Serve sends it)."""
        handler = self._methods[method]
        assert handler.unary_unary is not None
        return await handler.unary_unary(_parsed(handler, message), _Context(serve_context))

    async def stream(
        self, method: str, messages: AsyncIterator[Any], serve_context: Any
    ) -> AsyncIterator[Any]:
        """The responses of a bidirectional ``method`` (``ModelStreamInfer``), as it writes
        them; the handler runs in a task of its own, cancelled if the stream is left."""
        handler = self._methods[method]
        serve = handler.stream_stream
        assert serve is not None
        out: asyncio.Queue[Any] = asyncio.Queue(16)
        done = object()

        async def parsed() -> AsyncIterator[Any]:
            async for message in messages:
                yield _parsed(handler, message)

        async def run() -> None:
            try:
                await serve(parsed(), _Context(serve_context, out.put))
            finally:
                await out.put(done)

        task = asyncio.get_running_loop().create_task(run())
        try:
            while (item := await out.get()) is not done:
                yield item
            await task  # its failure, with the status set on Serve's context
        finally:
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)


def _parsed(handler: Any, message: Any) -> Any:
    """``message`` (its bytes, as the proxy sent them) parsed as ``handler``'s request."""
    if isinstance(message, bytes | bytearray | memoryview):
        return handler.request_deserializer(bytes(message))
    return message
