"""What browsers and proxies meet on the HTTP inference listener, as MLServer 1.7.1 gives it
(its ``cors_settings``, ``gzip_enabled`` and ``root_path``): three pure ASGI wrappers, each put
around the app only when its setting asks (:func:`with_web`), so the default path runs none.

- :class:`Cors`: Starlette's ``CORSMiddleware`` rules, which MLServer's FastAPI app uses: a
  preflight (``OPTIONS`` with ``Access-Control-Request-Method`` and an ``Origin``) is answered
  here, 200 ``OK`` or 400 ``Disallowed CORS origin, method, headers``; any other request with an
  ``Origin`` gets the CORS headers on its answer, whatever the route says.
- :class:`Gzip`: Starlette's ``GZipMiddleware`` rules for a whole answer: gzip when the client
  accepts it, the body is at least ``minimum_size`` bytes and carries no ``Content-Encoding``
  of its own. A stream (an answer sent in parts: SSE, chunked) passes as it is, so that each
  event still reaches the client when sent (MLServer's own app notes that gzip does not work
  with streaming).
- :class:`RootPath`: uvicorn's ``root_path`` (MLServer's setting) tells the app the prefix a
  proxy serves it under; Podium's routes answer both with the prefix (a proxy that keeps it)
  and without (one that strips it, ASGI's meaning), and ``scope["root_path"]`` holds it.
"""

from __future__ import annotations

import asyncio
import re
import zlib
from collections.abc import Iterable
from typing import Any

from ...config import Web
from .._asgi import ASGIApp, Message, Receive, Scope, Send, header
from ._responses import send_body

__all__ = ["Cors", "Gzip", "RootPath", "with_web"]

_ALL_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")
_SAFELISTED = frozenset({"accept", "accept-language", "content-language", "content-type"})
#: Bodies at least this large are compressed on a thread, off the event loop.
_THREAD_SIZE = 1 << 20
_LEVEL = 6  # zlib's default: most of level 9's ratio for much less CPU


def with_web(app: ASGIApp, web: Web) -> ASGIApp:
    """``app`` inside the wrappers ``web`` asks for: CORS outside gzip, as MLServer stacks them
    (a preflight is answered before anything else sees it); ``app`` itself when none. The root
    path is not among them (:class:`RootPath` goes outside the access log, which names routes
    by path)."""
    if web.gzip:
        app = Gzip(app, minimum_size=web.gzip_min_size)
    if web.cors:
        app = Cors(app, web)
    return app


def _with(headers: Iterable[tuple[bytes, bytes]], **changes: bytes) -> list[tuple[bytes, bytes]]:
    """``headers`` with those named by ``changes`` (``_`` for ``-``) replaced."""
    names = {key.replace("_", "-").encode(): value for key, value in changes.items()}
    kept = [(k, v) for k, v in headers if k.lower() not in names]
    return kept + list(names.items())


def _vary(headers: list[tuple[bytes, bytes]], name: bytes) -> list[tuple[bytes, bytes]]:
    """``headers`` with ``name`` added to their ``Vary`` (as Starlette's ``add_vary_header``)."""
    for index, (key, value) in enumerate(headers):
        if key.lower() == b"vary":
            headers[index] = (key, value + b", " + name)
            return headers
    headers.append((b"vary", name))
    return headers


class Cors:
    """CORS for ``app`` as ``web`` configures it (see the module docstring)."""

    def __init__(self, app: ASGIApp, web: Web) -> None:
        self.app = app
        self.any_origin = "*" in web.allow_origins
        self.origins = frozenset(web.allow_origins)
        self.regex = None if web.allow_origin_regex is None else re.compile(web.allow_origin_regex)
        self.methods = _ALL_METHODS if "*" in web.allow_methods else web.allow_methods
        self.any_header = "*" in web.allow_headers
        self.headers = frozenset(h.lower() for h in web.allow_headers) | _SAFELISTED
        self.explicit = not self.any_origin or web.allow_credentials
        simple: dict[str, str] = {}
        if self.any_origin:
            simple["access_control_allow_origin"] = "*"
        if web.allow_credentials:
            simple["access_control_allow_credentials"] = "true"
        if web.expose_headers:
            simple["access_control_expose_headers"] = ", ".join(web.expose_headers)
        self.simple = {k: v.encode() for k, v in simple.items()}
        preflight = {
            "access_control_allow_methods": ", ".join(self.methods),
            "access_control_max_age": str(web.max_age),
        }
        if not self.explicit:
            preflight["access_control_allow_origin"] = "*"
        if not self.any_header:
            preflight["access_control_allow_headers"] = ", ".join(
                sorted(h.title() if h in _SAFELISTED else h for h in self.headers)
            )
        if web.allow_credentials:
            preflight["access_control_allow_credentials"] = "true"
        self.preflight = {k: v.encode() for k, v in preflight.items()}

    def allowed(self, origin: str) -> bool:
        """Whether pages of ``origin`` may call."""
        if self.any_origin or origin in self.origins:
            return True
        return self.regex is not None and self.regex.fullmatch(origin) is not None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        origin = header(scope, b"origin") if scope["type"] == "http" else None
        if origin is None:
            await self.app(scope, receive, send)
            return
        method = header(scope, b"access-control-request-method")
        if scope["method"] == "OPTIONS" and method is not None:
            await self._answer_preflight(scope, origin, method, send)
            return
        explicit = (self.any_origin and header(scope, b"cookie") is not None) or (
            not self.any_origin and self.allowed(origin.decode("latin-1"))
        )

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = _with(message.get("headers", ()), **self.simple)
                if explicit:
                    headers = _vary(_with(headers, access_control_allow_origin=origin), b"Origin")
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_cors)

    async def _answer_preflight(
        self, scope: Scope, origin: bytes, method: bytes, send: Send
    ) -> None:
        headers: dict[str, bytes] = dict(self.preflight)
        failures = []
        if self.allowed(origin.decode("latin-1")):
            if self.explicit:
                headers["access_control_allow_origin"] = origin
        else:
            failures.append("origin")
        if method.decode("latin-1") not in self.methods:
            failures.append("method")
        requested = header(scope, b"access-control-request-headers")
        if requested is not None and self.any_header:
            headers["access_control_allow_headers"] = requested
        elif requested is not None:
            names = (h.strip() for h in requested.decode("latin-1").lower().split(","))
            if any(name not in self.headers for name in names):
                failures.append("headers")
        body = b"Disallowed CORS " + ", ".join(failures).encode() if failures else b"OK"
        listed = _with((), **headers, content_type=b"text/plain; charset=utf-8")
        if self.explicit:
            listed = _vary(listed, b"Origin")
        await send_body(send, 400 if failures else 200, listed, body)


def _accepts_gzip(scope: Scope) -> bool:
    """Whether the request's ``Accept-Encoding`` lists gzip (with a quality above 0)."""
    value = header(scope, b"accept-encoding")
    for item in (value or b"").decode("latin-1").lower().split(","):
        coding, *params = item.split(";")
        if coding.strip() != "gzip":
            continue
        for param in params:
            name, _, quality = param.partition("=")
            if name.strip() == "q":
                try:
                    return float(quality) > 0
                except ValueError:
                    return False
        return True
    return False


def _gzip(body: bytes) -> bytes:
    compressor = zlib.compressobj(_LEVEL, zlib.DEFLATED, 16 + zlib.MAX_WBITS)  # gzip framing
    return compressor.compress(body) + compressor.flush()


class Gzip:
    """Whole answers of ``app`` of at least ``minimum_size`` bytes, gzip-compressed for clients
    that accept gzip (see the module docstring)."""

    def __init__(self, app: ASGIApp, *, minimum_size: int = 500) -> None:
        self.app = app
        self.minimum_size = minimum_size

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _accepts_gzip(scope):
            await self.app(scope, receive, send)
            return
        held: list[Message] = []  # the start, until the first body says what to do

        async def send_compressed(message: Message) -> None:
            if message["type"] == "http.response.start":
                held.append(message)
                return
            if held:
                start = held.pop()
                await send(await self._started(start, message))
            await send(message)

        await self.app(scope, receive, send_compressed)
        if held:  # an app that never sent a body: the start as it was
            await send(held.pop())

    async def _started(self, start: Message, first: Message) -> Message:
        """``start`` for the answer whose first message is ``first``, which it compresses in
        place when the answer is to be compressed."""
        headers = start.get("headers", ())
        if (
            first["type"] != "http.response.body"
            or first.get("more_body", False)
            or len(first.get("body", b"")) < self.minimum_size
            or any(key.lower() == b"content-encoding" for key, _ in headers)
        ):
            return start
        body = bytes(first.get("body", b""))
        if len(body) >= _THREAD_SIZE:
            compressed = await asyncio.to_thread(_gzip, body)
        else:
            compressed = _gzip(body)
        first["body"] = compressed
        changed = _with(
            headers, content_encoding=b"gzip", content_length=str(len(compressed)).encode()
        )
        start["headers"] = _vary(changed, b"Accept-Encoding")
        return start


class RootPath:
    """``app`` served under ``root`` (a path without a trailing ``/``) as well as at ``/``."""

    def __init__(self, app: ASGIApp, root: str) -> None:
        self.app = app
        self.root = root
        self.raw_root = root.encode()
        self.length = len(root)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            path: str = scope["path"]
            if path.startswith(self.root) and path[self.length : self.length + 1] in ("", "/"):
                scope["path"] = path[self.length :] or "/"
                raw: Any = scope.get("raw_path")
                if isinstance(raw, bytes) and raw.startswith(self.raw_root):
                    scope["raw_path"] = raw[self.length :] or b"/"
            scope["root_path"] = self.root
        await self.app(scope, receive, send)
