"""The management REST API (TorchServe's, on ``--management-port``, 8081): a pure ASGI app.

Routes, as TorchServe has them (:data:`MANAGEMENT_ROUTES`, at the end, is the table that
dispatches them, answers 405 with ``Allow``, and is what ``OPTIONS /`` describes)::

    POST   /models?url=...                 register (parameters in the query or a JSON body)
    GET    /models                         list (limit, next_page_token)
    GET    /models/{m}[/{v}|/all]          describe
    PUT    /models/{m}[/{v}]               scale (min_worker, max_worker, synchronous)
    PUT    /models/{m}/{v}/set-default     set the default version
    DELETE /models/{m}[/{v}]               unregister
    POST   /token?type=management|inference  new key (with --auth; needs the API key)
    OPTIONS /                              the API's description (OpenAPI 3.1)
    GET    /api-description                the same (TorchServe's legacy path)

Empty segments and trailing slashes are ignored, as TorchServe does. Answers are TorchServe's:
``{"status": "..."}`` on success, ``{"code", "type", "message"}`` on failure, with the status
codes of the one table in ``errors.py``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from urllib.parse import parse_qsl

import msgspec

from ...codecs import JSON_ERRORS, json_problem
from ...errors import InvalidInput, MethodNotAllowed, PayloadTooLarge, PodiumError, Unauthenticated
from .._asgi import Receive, Scope, Send, header, serve_other_scope
from .._auth import INFERENCE, MANAGEMENT, Authorizer
from .._ts_errors import NoRoute, torchserve_error
from ..http import Api, Route, RouteTable
from ..http._responses import JSON, send_body, send_error
from ._core import Management, Outcome
from ._openapi import description
from ._params import Registration, Scaling, page

__all__ = ["MANAGEMENT_ROUTES", "ManagementApp", "render_unauthenticated"]

logger = logging.getLogger("podium.management")

#: The largest registration body read (a JSON object of a few parameters).
MAX_BODY = 1024 * 1024

_encoder = msgspec.json.Encoder()


def render_unauthenticated(exc: Unauthenticated, path: str = "") -> tuple[int, bytes]:
    """The 401 body of the management listener's auth middleware."""
    status, body = torchserve_error(exc)
    return status, _encoder.encode(body)


class ManagementApp:
    """The ASGI application of the management API over one :class:`Management`."""

    def __init__(self, management: Management, *, authorizer: Authorizer | None = None) -> None:
        self.management = management
        self.authorizer = authorizer
        self._router = MANAGEMENT_ROUTES.compile(self)
        self._description = description(MANAGEMENT_ROUTES)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await serve_other_scope(scope, receive, send)
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

    async def _error(self, send: Send, exc: PodiumError) -> None:
        extra = []
        if isinstance(exc, MethodNotAllowed):
            extra.append((b"allow", ", ".join(exc.allowed).encode()))
        await send_error(send, exc, extra, torchserve=True)

    async def _handle(self, scope: Scope, receive: Receive) -> Outcome:
        method = scope["method"]
        path = scope["path"]
        normal = "/" + "/".join(p for p in path.split("/") if p)
        found = self._router.match(method, normal)
        if found is None:
            raise NoRoute(f"no management route for {method} {path}")
        handler, args = found
        reply: Outcome = await handler(scope, receive, *args)
        return reply

    # -- handlers (MANAGEMENT_ROUTES) ----------------------------------------------------------

    async def _api_description(self, scope: Scope, receive: Receive) -> Outcome:
        return Outcome(200, self._description)

    async def _token(self, scope: Scope, receive: Receive) -> Outcome:
        if self.authorizer is None:
            raise NoRoute("token authorization is off (start the server with --auth)")
        kind = _query(scope).get("type")
        if kind not in (MANAGEMENT, INFERENCE):
            raise InvalidInput(f"parameter type must be management or inference, got {kind!r}")
        self.authorizer.regenerate(kind)
        return Outcome(
            200, {"status": f"the {kind} key was replaced; see {self.authorizer.key_file}"}
        )

    async def _list(self, scope: Scope, receive: Receive) -> Outcome:
        return self.management.list_models(*page(_query(scope)))

    async def _register(self, scope: Scope, receive: Receive) -> Outcome:
        values = {**_query(scope), **(await _json_body(scope, receive))}
        return await self.management.register(Registration.parse(values))

    async def _describe(
        self, scope: Scope, receive: Receive, model_name: str, model_version: str | None
    ) -> Outcome:
        # "customized" is accepted and ignored
        return self.management.describe(model_name, model_version)

    async def _scale(
        self, scope: Scope, receive: Receive, model_name: str, model_version: str | None
    ) -> Outcome:
        scaling = Scaling.parse(_query(scope))
        return await self.management.scale(model_name, model_version, scaling)

    async def _set_default(
        self, scope: Scope, receive: Receive, model_name: str, model_version: str
    ) -> Outcome:
        return self.management.set_default(model_name, model_version)

    async def _unregister(
        self, scope: Scope, receive: Receive, model_name: str, model_version: str | None
    ) -> Outcome:
        return await self.management.unregister(model_name, model_version)


def _query(scope: Scope) -> dict[str, str]:
    """The query's parameters; the first of a repeated one counts."""
    return dict(reversed(parse_qsl(scope["query_string"].decode("latin-1"), True)))


async def _json_body(scope: Scope, receive: Receive) -> dict[str, Any]:
    """The registration parameters in a JSON body, if the request has one."""
    content_type = (header(scope, b"content-type") or b"").split(b";")[0].strip().lower()
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
        values = msgspec.json.decode(body)
    except JSON_ERRORS as exc:
        raise InvalidInput(f"the body is not valid JSON: {json_problem(exc, body)}") from exc
    except RecursionError:
        raise InvalidInput("the body is not valid JSON: it is nested too deeply") from None
    if not isinstance(values, dict):
        raise InvalidInput("the body must be a JSON object of registration parameters")
    return {k: v for k, v in values.items() if v is not None}


_API = Api.MANAGEMENT
_DEFAULT_VERSION = {"model_version": None}
_M, _MV = "/models/{model_name}", "/models/{model_name}/{model_version}"

#: Every route of the management listener; each name is the operation's id in the description
#: (``OPTIONS /``, :mod:`._openapi`), TorchServe's where it has one.
MANAGEMENT_ROUTES = RouteTable(
    [
        Route("OPTIONS", "/", ManagementApp._api_description, _API, "apiDescription"),
        Route(
            "GET", "/api-description", ManagementApp._api_description, _API, "apiDescriptionLegacy"
        ),
        Route("GET", "/models", ManagementApp._list, _API, "listModels"),
        Route("POST", "/models", ManagementApp._register, _API, "registerModel"),
        Route("GET", _M, ManagementApp._describe, _API, "describeModel", args=_DEFAULT_VERSION),
        Route("PUT", _M, ManagementApp._scale, _API, "setAutoScale", args=_DEFAULT_VERSION),
        Route(
            "DELETE", _M, ManagementApp._unregister, _API, "unregisterModel", args=_DEFAULT_VERSION
        ),
        Route("GET", _MV, ManagementApp._describe, _API, "describeModelVersion"),
        Route("PUT", _MV, ManagementApp._scale, _API, "setAutoScaleVersion"),
        Route("DELETE", _MV, ManagementApp._unregister, _API, "unregisterModelVersion"),
        Route("PUT", _MV + "/set-default", ManagementApp._set_default, _API, "setDefault"),
        # TorchServe 0.9's token plugin answered GET too
        Route(("POST", "GET"), "/token", ManagementApp._token, _API, "token"),
    ],
    leading=("scope", "receive"),
)
