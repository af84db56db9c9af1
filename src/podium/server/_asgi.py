"""The ASGI contract the HTTP front ends are written against (after Starlette's ``types.py``).

An ASGI application is ``await app(scope, receive, send)``: ``scope`` describes the connection
(``type``, ``method``, ``path``, ``headers``, ...), ``receive`` yields the client's messages
(``http.request`` bodies, ``http.disconnect``) and ``send`` takes the answer's
(``http.response.start``, ``http.response.body``). Podium's apps (``server/http``,
``server/management``) and its middleware (``server/_auth.py``) speak exactly this and nothing
more: no framework sits between the server (uvicorn) and them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, TypeAlias

__all__ = ["ASGIApp", "Message", "Receive", "Scope", "Send", "header", "serve_other_scope"]

Scope: TypeAlias = MutableMapping[str, Any]
Message: TypeAlias = MutableMapping[str, Any]

Receive: TypeAlias = Callable[[], Awaitable[Message]]
Send: TypeAlias = Callable[[Message], Awaitable[None]]

ASGIApp: TypeAlias = Callable[[Scope, Receive, Send], Awaitable[None]]


def header(scope: Scope, name: bytes) -> bytes | None:
    """The value of the request's first header ``name`` (lower-case, as ASGI gives names)."""
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None


async def serve_other_scope(scope: Scope, receive: Receive, send: Send) -> None:
    """What Podium's apps answer to a scope that is not ``http``: the lifespan (nothing to set
    up or tear down: the runner owns the models and workers) is acknowledged, a WebSocket is
    closed (1003: Podium serves none), anything else is left alone."""
    kind = scope["type"]
    if kind == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    elif kind == "websocket":
        await send({"type": "websocket.close", "code": 1003})
