"""TorchServe's gRPC management API: ``org.pytorch.serve.grpc.management.ManagementAPIsService``.

Wire-compatible with TorchServe's ``management.proto`` (``protos/torchserve_management.proto``).
Each RPC does what its REST route does (``server/management``), and the reply's ``msg`` carries
what TorchServe's does: the status text for register, scale, set-default and unregister, the
REST body's JSON for list and describe; failures are statuses from the one table in
``errors.py``. Unless ``--no-auth``, every call needs the management key in its
``authorization`` metadata (``Bearer <key>``): the listener checks it before anything else runs
(``GrpcServer``'s ``authorize``, as for the inference listener's key).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import msgspec

from ...errors import InvalidInput
from ..management import Management, Outcome, Registration, Scaling, page
from ._errors import guarded
from ._pool import message_class
from ._server import Service

__all__ = ["SERVICE", "ManagementService"]

SERVICE = "org.pytorch.serve.grpc.management.ManagementAPIsService"
_PACKAGE = "org.pytorch.serve.grpc.management"

ManagementResponse: Any = message_class(f"{_PACKAGE}.ManagementResponse")

_encoder = msgspec.json.Encoder()


class ManagementService:
    """``ManagementAPIsService`` over one :class:`~podium.server.management.Management`."""

    def __init__(self, management: Management) -> None:
        self.management = management

    def service(self) -> Service:
        """The service's method handlers, for :class:`GrpcServer`."""
        handlers: dict[str, Callable[[Any], Awaitable[Outcome]]] = {
            "DescribeModel": self.describe,
            "ListModels": self.list_models,
            "RegisterModel": self.register,
            "ScaleWorker": self.scale,
            "SetDefault": self.set_default,
            "UnregisterModel": self.unregister,
        }
        methods = {
            name: grpc.unary_unary_rpc_method_handler(
                self._wrap(name, handler),
                # each RPC's request is its name's message: RegisterModel takes RegisterModelRequest
                request_deserializer=message_class(f"{_PACKAGE}.{name}Request").FromString,
                response_serializer=ManagementResponse.SerializeToString,
            )
            for name, handler in handlers.items()
        }
        return Service(SERVICE, methods, protocol="management_grpc")

    def _wrap(
        self, name: str, handler: Callable[[Any], Awaitable[Outcome]]
    ) -> Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]:

        async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
            reply = await handler(request)
            if reply.text is not None:  # as TorchServe: the status text, not its JSON
                return ManagementResponse(msg=reply.text)
            return ManagementResponse(msg=_encoder.encode(reply.body).decode())

        return guarded(call, f"/{SERVICE}/{name}")

    # -- the six RPCs ----------------------------------------------------------------------

    async def register(self, request: Any) -> Outcome:
        values = _given(
            request,
            "model_name",
            "batch_size",
            "max_batch_delay",
            "initial_workers",
            "response_timeout",
            "runtime",
            "handler",
            "s3_sse_kms",
        )
        return await self.management.register(Registration.parse({"url": request.url, **values}))

    async def unregister(self, request: Any) -> Outcome:
        return await self.management.unregister(
            _name(request.model_name), request.model_version or None
        )

    async def scale(self, request: Any) -> Outcome:
        scaling = Scaling.parse(_given(request, "min_worker", "max_worker"))
        return await self.management.scale(
            _name(request.model_name), request.model_version or None, scaling
        )

    async def list_models(self, request: Any) -> Outcome:
        return self.management.list_models(
            *page({"limit": request.limit, "next_page_token": request.next_page_token})
        )

    async def describe(self, request: Any) -> Outcome:
        return self.management.describe(_name(request.model_name), request.model_version or None)

    async def set_default(self, request: Any) -> Outcome:
        if not request.model_version:
            raise InvalidInput("model_version is required")
        return self.management.set_default(_name(request.model_name), request.model_version)


def _given(request: Any, *keys: str) -> dict[str, Any]:
    """The REST parameters ``request``'s fields ``keys`` are, and its ``synchronous``: proto3's
    0, "" and false are "not given", as TorchServe reads them."""
    values = {key: getattr(request, key) for key in keys if getattr(request, key)}
    return {**values, "synchronous": request.synchronous}


def _name(name: str) -> str:
    if not name:
        raise InvalidInput("model_name is required")
    return name
