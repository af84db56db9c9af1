"""The management REST API (TorchServe's, on ``--management-port``, 8081): a pure ASGI app.

Routes, as TorchServe has them::

    POST   /models?url=...                 register (parameters in the query or a JSON body)
    GET    /models                         list (limit, next_page_token)
    GET    /models/{m}[/{v}|/all]          describe
    PUT    /models/{m}[/{v}]               scale (min_worker, max_worker, synchronous)
    PUT    /models/{m}/{v}/set-default     set the default version
    DELETE /models/{m}[/{v}]               unregister
    POST   /token?type=management|inference  new key (with --auth; needs the API key)
    OPTIONS /                              the API's description (OpenAPI 3)

Answers are TorchServe's: ``{"status": "..."}`` on success, ``{"code", "type", "message"}`` on
failure, with the status codes of the one table in ``errors.py``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from urllib.parse import parse_qsl

import msgspec

from ...errors import (
    Conflict,
    InvalidInput,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    PodiumError,
    Unauthenticated,
    Unavailable,
    http_status,
)
from .._auth import INFERENCE, MANAGEMENT, Authorizer
from ..http._responses import JSON, send_body
from ._core import Management, Outcome
from ._openapi import description
from ._params import Registration, Scaling, page

__all__ = ["ManagementApp", "error_body", "render_unauthenticated"]

logger = logging.getLogger("podium.management")

#: The largest registration body read (a JSON object of a few parameters).
MAX_BODY = 1024 * 1024

_encoder = msgspec.json.Encoder()


class NoRoute(NotFound):
    """No management route has this path."""


def _type(exc: PodiumError) -> str:
    """TorchServe's name for the error, in the ``type`` field of an error body."""
    if isinstance(exc, NoRoute):
        return "ResourceNotFoundException"
    for cls, name in (
        (NotFound, "ModelNotFoundException"),
        (Conflict, "ConflictStatusException"),
        (InvalidInput, "BadRequestException"),
        (PayloadTooLarge, "BadRequestException"),
        (MethodNotAllowed, "MethodNotAllowedException"),
        (Unavailable, "ServiceUnavailableException"),
        (Unauthenticated, "InvalidKeyException"),
    ):
        if isinstance(exc, cls):
            return name
    return "InternalServerException"


def error_body(exc: PodiumError) -> tuple[int, dict[str, Any]]:
    """The status and TorchServe's error body for ``exc``."""
    status = http_status(exc)
    return status, {"code": status, "type": _type(exc), "message": exc.message}


def render_unauthenticated(exc: Unauthenticated) -> tuple[int, bytes]:
    """The 401 body of the management listener's auth middleware."""
    status, body = error_body(exc)
    return status, _encoder.encode(body)


class ManagementApp:
    """The ASGI application of the management API over one :class:`Management`."""

    def __init__(self, management: Management, *, authorizer: Authorizer | None = None) -> None:
        self.management = management
        self.authorizer = authorizer

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1003})
            return
        try:
            reply = await self._handle(scope, receive)
            await send_body(send, reply.status, JSON, _encoder.encode(reply.body))
        except PodiumError as exc:
            await self._error(send, exc)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.exception("unexpected error serving %s %s", scope["method"], scope["path"])
            await self._error(send, PodiumError(f"internal error: {type(exc).__name__}: {exc}"))

    async def _error(self, send: Any, exc: PodiumError) -> None:
        status, body = error_body(exc)
        if status >= 500:
            logger.warning("%s %s", status, exc.message)
        headers = list(JSON)
        if isinstance(exc, MethodNotAllowed):
            headers.append((b"allow", ", ".join(exc.allowed).encode()))
        await send_body(send, status, headers, _encoder.encode(body))

    async def _handle(self, scope: dict[str, Any], receive: Any) -> Outcome:
        method = scope["method"]
        path = scope["path"]
        parts = [p for p in path.split("/") if p]
        query = dict(reversed(parse_qsl(scope["query_string"].decode("latin-1"), True)))
        ops = self.management
        if not parts:
            _allow(method, ("OPTIONS",), "/")
            return Outcome(200, description())
        if parts[0] == "token" and len(parts) == 1:
            _allow(method, ("POST", "GET"), "/token")  # TorchServe 0.9's plugin answered GET
            return self._token(query)
        if parts[0] != "models" or len(parts) > 4:
            raise NoRoute(f"no management route for {method} {path}")
        if len(parts) == 1:
            _allow(method, ("GET", "POST"), "/models")
            if method == "POST":
                values = {**query, **(await _json_body(scope, receive))}
                return await ops.register(Registration.parse(values))
            return ops.list_models(*page(query))
        name = parts[1]
        version = parts[2] if len(parts) >= 3 else None
        if len(parts) == 4:
            if parts[3] != "set-default":
                raise NoRoute(f"no management route for {method} {path}")
            _allow(method, ("PUT",), path)
            return ops.set_default(name, parts[2])
        _allow(method, ("GET", "PUT", "DELETE"), path)
        if method == "GET":
            return ops.describe(name, version)  # "customized" is accepted and ignored
        if version == "all":
            raise InvalidInput(f"{method} {path}: 'all' names no version; name one")
        if method == "PUT":
            return await ops.scale(name, version, Scaling.parse(query))
        return await ops.unregister(name, version)

    def _token(self, query: dict[str, str]) -> Outcome:
        if self.authorizer is None:
            raise NoRoute("token authorization is off (start the server with --auth)")
        kind = query.get("type")
        if kind not in (MANAGEMENT, INFERENCE):
            raise InvalidInput(f"parameter type must be management or inference, got {kind!r}")
        self.authorizer.regenerate(kind)
        return Outcome(
            200, {"status": f"the {kind} key was replaced; see {self.authorizer.key_file}"}
        )


def _allow(method: str, allowed: tuple[str, ...], what: str) -> None:
    if method not in allowed:
        raise MethodNotAllowed(
            f"{what} does not accept {method}; use {', '.join(allowed)}", allowed
        )


async def _json_body(scope: dict[str, Any], receive: Any) -> dict[str, Any]:
    """The registration parameters in a JSON body, if the request has one."""
    content_type = b""
    for key, value in scope["headers"]:
        if key == b"content-type":
            content_type = value.split(b";")[0].strip().lower()
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":  # nobody will read the answer
            raise InvalidInput("the client disconnected before sending the whole body")
        body += message.get("body", b"")
        if len(body) > MAX_BODY:
            raise PayloadTooLarge(f"a registration body must be at most {MAX_BODY} bytes")
        if not message.get("more_body", False):
            break
    if not body.strip() or content_type != b"application/json":
        return {}
    try:
        values = msgspec.json.decode(bytes(body))
    except msgspec.DecodeError as exc:
        raise InvalidInput(f"the body is not valid JSON: {exc}") from exc
    if not isinstance(values, dict):
        raise InvalidInput("the body must be a JSON object of registration parameters")
    return {k: v for k, v in values.items() if v is not None}
