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

__all__ = ["ASGIApp", "Message", "Receive", "Scope", "Send"]

Scope: TypeAlias = MutableMapping[str, Any]
Message: TypeAlias = MutableMapping[str, Any]

Receive: TypeAlias = Callable[[], Awaitable[Message]]
Send: TypeAlias = Callable[[Message], Awaitable[None]]

ASGIApp: TypeAlias = Callable[[Scope, Receive, Send], Awaitable[None]]
