"""Each HTTP request's id, access line and span: a pure ASGI middleware, outermost on a listener.

:class:`AccessMiddleware` takes the request's id from ``X-Request-ID`` (or makes one), sets it
as the current request for everything below (the app, the data plane, the model, their log
lines), answers it in the ``X-Request-ID`` response header, and when the request has ended (a
stream at its end) hands it to the access log, which makes its line at the end of the event
loop's turn: the route is found in the listener's route table then, only if a line is written
(``RouteTable.names``), with the lines of the other requests that ended in the same turn. A
request whose client left before any response started is logged with status 499 (nginx's
"client closed request"). Responses that the connection layer answers itself (503 past
``--max-connections``, 408 past a timeout) never reach an app and have no line;
``server/_limits.py`` counts them.

With tracing on (``podium.tracing.hooks``), the request is a server span, a child of the
``traceparent`` the client sent.

Behind a proxy (:meth:`AccessMiddleware.forwarded_from`, as ``podium serve`` sets it up), the
``X-Forwarded-For`` and ``X-Forwarded-Proto`` headers of a request from a trusted peer give its
client and scheme, by uvicorn's own ``ProxyHeadersMiddleware``: the header loop that looks for
the request id notices them, so a request without them (the common case) pays nothing for it.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable
from typing import Any, TypeAlias, cast

from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from ... import tracing
from ...errors import InvalidInput, PodiumError
from ...types import current_request
from .._access import (
    ID_HEADER,
    MAX_PATH,
    QUEUE_HEADERS,
    Access,
    AccessLog,
    RequestIds,
    access_head,
    ask_of_queue,
    client_id,
    printable,
)
from .._asgi import ASGIApp, Message, Receive, Scope, Send
from .._cycle import CheckedPair
from ._routing import Route, RouteTable

__all__ = ["AccessMiddleware", "HttpAccess"]

_now = time.perf_counter_ns

#: The status logged for a request whose client left before any response started.
CLIENT_CLOSED = 499

#: The most paths whose route and printable form are remembered at once (of at most MAX_PATH
#: characters each: a bounded memory whatever the paths clients send).
KNOWN = 512

#: The headers by which a proxy tells the client's address and scheme (uvicorn reads them).
FORWARDED = frozenset({b"x-forwarded-for", b"x-forwarded-proto"})
#: The request headers the middleware looks at besides the id (one set: one test per header).
_NOTED = QUEUE_HEADERS | FORWARDED

#: A path's route, the route's name and protocol, the path as a line shows it, and the text
#: line's ``protocol route "method path"`` (Access.head), made once.
_Known: TypeAlias = tuple[Route | None, str | None, str | None, str, str]


class AccessMiddleware:
    """The request id, access line and span of every HTTP request to ``app`` (see the module's
    docstring). ``routes``: the listener's route table (what a line names the route by);
    ``normalize``: find routes as the management API does, with empty segments left out."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        log: AccessLog,
        ids: RequestIds,
        routes: RouteTable,
        normalize: bool = False,
    ) -> None:
        self.app = app
        self.log = log
        self.ids = ids
        self._routes = routes.names()
        self._normalize = normalize
        self._templates: dict[Route, str] = {}  # each route's path template, made once
        self._known: dict[tuple[str, str], _Known] = {}  # by method and path (_look_up)
        #: the last peer described and its text: a connection's requests share one ``client``
        #: tuple (uvicorn's), so its text is made once for them (one attribute: the log's
        #: thread reads and replaces it whole)
        self._peer: tuple[Any, str] = ((), "")
        #: what serves scopes other than HTTP requests (WebSockets): the app, or uvicorn's
        #: proxy headers before it (forwarded_from)
        self._other: Any = app
        #: uvicorn's proxy headers over nothing: rewrites a request's scope, in place
        self._forwarded: Any = None

    def forwarded_from(self, trusted_hosts: list[str] | str) -> None:
        """Take ``X-Forwarded-For`` and ``X-Forwarded-Proto`` from the peers ``trusted_hosts``
        names (uvicorn's ``forwarded_allow_ips``), exactly as uvicorn's
        ``ProxyHeadersMiddleware`` does, which the server then need not run around this."""
        # (Any: uvicorn's ASGI types are narrower than Podium's, for the same messages)
        self._other = ProxyHeadersMiddleware(cast(Any, self.app), trusted_hosts)
        self._forwarded = ProxyHeadersMiddleware(cast(Any, _nothing), trusted_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._other(scope, receive, send)
            return
        start = _now()
        sent = None
        asks = None
        forwarded = False
        for key, value in scope["headers"]:
            if key == ID_HEADER:
                sent = value
            elif key in _NOTED:
                if key in FORWARDED:
                    forwarded = True
                else:
                    asks = (asks or []) + [(key, value)]
        if forwarded and self._forwarded is not None:
            await self._forwarded(scope, receive, send)  # the client and scheme, from a proxy
        found = None if sent is None else client_id(sent)
        access = HttpAccess(self.ids.make() if found is None else found, found is not None, start)
        access._receive = receive
        access._send = send
        access.counting = False
        if asks is not None:
            try:
                for key, value in asks:
                    ask_of_queue(access, key, value)
            except InvalidInput as exc:
                from ._responses import send_error  # (which imports this module: see send_body)

                token = current_request.set(access)
                try:
                    await send_error(access.send, exc)
                finally:
                    current_request.reset(token)
                    access._receive = access._send = None
                access.ended()
                access.context = scope
                access.describe = self._describe
                self.log.write(access)
                return
        hooks = tracing.hooks
        if hooks is not None:
            access.span = hooks.http_request(scope)
        counting = access.counting = self.log.wants()
        token = current_request.set(access)
        try:
            await self.app(scope, access.receive if counting else receive, access.send)
        except BaseException as exc:
            if access.status is None:
                access.status = CLIENT_CLOSED if not isinstance(exc, Exception) else 500
            raise
        finally:
            current_request.reset(token)
            # (the line is made later: what the request's connection holds is let go now)
            access._receive = access._send = None
            if access.status is None:
                access.status = CLIENT_CLOSED
            if access.span is not None:
                self._finish(scope, access)
            elif counting:
                # the rest of the line (route, path, peer) is made with the line, by the log's
                # thread (AccessLog.write; wants() was asked as the request began)
                access.end = _now()  # (Access.ended, without its call)
                access.context = scope
                access.describe = self._describe
                self.log.write(access, True)

    def _describe(self, access: Access) -> Route | None:
        """What the line says of the request (its scope is ``access.context``); its route."""
        access.describe = None
        scope = access.context
        method = scope["method"]
        path = scope["path"]
        known = self._known.get((method, path))
        if known is None:
            known = self._look_up(method, path)
        route, name, protocol, shown, head = known
        access.method = method
        access.path = shown
        access.route = name
        access.protocol = protocol
        access.head = head
        client = scope.get("client")
        if client:
            last = self._peer
            if client is last[0]:  # (the same tuple: it cannot have changed)
                access.peer = last[1]
            else:
                peer = access.peer = f"{client[0]}:{client[1]}"
                self._peer = (client, peer)
        return route

    def _look_up(self, method: str, path: str) -> _Known:
        """A path's route and what its line says of it; remembered for the next requests to
        it, if it is short (at most KNOWN paths are; then they are forgotten all at once)."""
        found_at = path
        if self._normalize:
            found_at = "/" + "/".join(p for p in path.split("/") if p)
        try:
            found = self._routes.match(method, found_at)
        except PodiumError:  # a known path with another method (405)
            found = None
        route = name = protocol = None
        if found is not None:
            route = cast(Route, found[0])  # what names() answers in place of a handler
            name, protocol = route.name, route.protocol.value
        shown = printable(path)
        known = (route, name, protocol, shown, access_head(protocol, name, method, shown))
        if len(path) <= MAX_PATH:
            if len(self._known) >= KNOWN:
                self._known.clear()
            self._known[(method, path)] = known
        return known

    def _finish(self, scope: Scope, access: Access) -> None:
        """A traced request: its line's fields now (the span is ended with them)."""
        access.ended()
        access.context = scope
        route = self._describe(access)
        hooks = tracing.hooks
        if access.span is not None and hooks is not None:
            template = None
            if route is not None:
                template = self._templates.get(route)
                if template is None:
                    template = self._templates[route] = route.template
            hooks.http_ended(access.span, access, template)
        self.log.write(access)


async def _nothing(scope: Scope, receive: Receive, send: Send) -> None:
    """The app under :attr:`AccessMiddleware._forwarded`: what it is for is done to the scope."""


class HttpAccess(Access):
    """An HTTP request's :class:`Access`, which is also its ``receive`` and ``send`` as the app
    gets them: the request id added to the response's headers (a :class:`CheckedPair`, which
    Podium's request cycle writes unchecked: an id is only ever made of ``ID_CHARACTERS``,
    ``RequestIds``' and a client's only if it is, ``client_id``, which no header check
    refuses) and its status noted, and
    (``counting``) the body's bytes each way. (The request's one object: its methods are the
    wrappers, with no second object per request to make.)

    An app that reads the body itself may take the server's ``receive`` from under this one
    and count the bytes it reads into :attr:`bytes_in` (the HTTP app's ``Exchange`` does:
    one coroutine less per ``receive()``); any other app is counted here."""

    __slots__ = ("counting", "_receive", "_send")

    counting: bool
    _receive: Any  # the server's, while the request is served (None after)
    _send: Any

    async def receive(self) -> Message:
        """``receive``, counting the body's bytes."""
        message = await self._receive()
        body = message.get("body")
        if body:
            self.bytes_in += len(body)
        return message

    def send(self, message: Message) -> Awaitable[None]:
        """``send``'s own awaitable (not a coroutine function: a message costs no second
        coroutine). The start's headers get the id in place, as Starlette's middlewares set
        theirs (the message is the app's to give away; its list of headers is not: it may be a
        constant of the app's, so a new one is made)."""
        if message["type"] == "http.response.start":
            self.status = message["status"]
            headers: Any = message.get("headers", ())
            for key, _ in headers:  # (a loop, not any() over a generator: cheaper)
                if key.lower() == ID_HEADER:  # a model set one: ours only
                    headers = [(k, value) for k, value in headers if k.lower() != ID_HEADER]
                    break
            message["headers"] = [*headers, CheckedPair((ID_HEADER, self.id.encode()))]
        elif self.counting:
            body = message.get("body")
            if body:
                self.bytes_out += len(body)
        return self._send(message)

    def whole(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> Send:
        """The server's ``send``, for a whole response the app is about to send in two messages
        (``_responses.send_body``): what :meth:`send` does to them, done here at once, with no
        call of :meth:`send` per message: the status noted, the body's bytes counted, and the
        id added to ``headers`` (a list the app made for this response: changed in place)."""
        self.status = status
        if self.counting and body:
            self.bytes_out += len(body)
        for key, _ in headers:  # (send's loop: the app's list is changed, not copied)
            if key.lower() == ID_HEADER:
                headers[:] = [(k, value) for k, value in headers if k.lower() != ID_HEADER]
                break
        headers.append(CheckedPair((ID_HEADER, self.id.encode())))
        return self._send
