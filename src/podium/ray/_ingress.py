"""The ingress: Podium's HTTP front end in a Ray Serve replica, behind Serve's HTTP proxy.

Serve's proxy hands each HTTP request to the ingress as ASGI; the ingress's ASGI app is
Podium's own :class:`~podium.server.http.HttpApp` (OIP REST with SSE streams, generate and the
binary tensor extension; Truss; TorchServe inference; the API description), over a
:class:`~podium.ray._remote.RemotePlane` whose versions run in their own deployments. One code
path: what parses a request and renders an answer on ``podium serve`` does it here.

Serve builds the class ``serve.ingress()`` makes of :class:`Ingress` (``_app.py``): it awaits the
constructor, which asks one replica of each version what the model takes, then serves the app
that ``__serve_build_asgi_app__`` returns.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from ..config import ModelConfig
from ..server.http import HttpApp
from ._grpc import GrpcFront
from ._options import IngressSettings
from ._remote import RemotePlane

__all__ = ["Ingress"]

logger = logging.getLogger("podium.ray")


def _unary(rpc: str) -> Callable[[Any, Any, Any], Awaitable[Any]]:
    """The ingress's method ``rpc``, by which Serve's gRPC proxy calls a unary RPC."""

    async def method(self: Ingress, request: Any, grpc_context: Any) -> Any:
        return await self.podium_grpc.unary(rpc, request, grpc_context)

    method.__name__ = rpc
    return method


class Ingress:
    """``models``: each version's config (as the builder found it) and its deployment's
    handle; ``settings``: what the front end runs with."""

    async def __init__(  # type: ignore[misc]  # Serve awaits an async constructor
        self, models: list[tuple[ModelConfig, Any]], settings: IngressSettings
    ) -> None:
        logging.getLogger("podium").setLevel(settings.log_level.upper())
        # Names of its own: Serve's wrapper class has an `app` property and more.
        self.podium_plane = RemotePlane()
        # One call on each handle before any options(): the stream handles made from it then
        # share its router, and so the pins of its sequences (_router.py).
        described = await asyncio.gather(*(handle.describe.remote() for _, handle in models))
        for (config, handle), capabilities in zip(models, described, strict=True):
            self.podium_plane.add(config, capabilities, handle)
        self.podium_grpc = GrpcFront(self.podium_plane)
        self.podium_app = HttpApp(
            self.podium_plane,
            max_request_size=settings.max_request_size,
            sequence_header=settings.sequence_header,
        )
        names = ", ".join(sorted({config.name for config, _ in models}))
        logger.info("the ingress serves %d model version(s): %s", len(models), names)

    def __serve_build_asgi_app__(self) -> HttpApp:
        """The ASGI app Serve's proxy sends requests to."""
        return self.podium_app

    # -- OIP gRPC, as Serve's gRPC proxy calls it (_grpc.py): one method per RPC, by name -----

    ServerLive = _unary("ServerLive")
    ServerReady = _unary("ServerReady")
    ModelReady = _unary("ModelReady")
    ServerMetadata = _unary("ServerMetadata")
    ModelMetadata = _unary("ModelMetadata")
    ModelConfig = _unary("ModelConfig")
    ModelInfer = _unary("ModelInfer")
    RepositoryIndex = _unary("RepositoryIndex")

    async def ModelStreamInfer(  # noqa: N802
        self, requests: AsyncIterator[Any], grpc_context: Any
    ) -> AsyncIterator[Any]:
        async for response in self.podium_grpc.stream("ModelStreamInfer", requests, grpc_context):
            yield response
