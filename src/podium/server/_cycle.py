"""A request's cycle on the guarded protocol (``_limits.py``): uvicorn's ``RequestResponseCycle``
with a response head that costs less to write.

uvicorn checks every response header pair on every response: two regular expression searches
(the name's characters, the value's), the name lowered, three comparisons for the names that
change how the body is framed (``content-length``, ``transfer-encoding``, ``connection``), and
four pieces appended to the head. A server answers most responses with the same few pairs
(``date`` for a second, ``content-type``, a route's own headers, a body's length):
:class:`Cycle` remembers the line (``name: value\\r\\n``, the name lowered) of each pair that
passed those checks, with the length of a ``content-length`` pair, so that the next response
with the same pair appends that line after one dictionary look-up. Pairs uvicorn refuses are
never remembered: each is checked again and refused with uvicorn's own exception and message
(its request cycle then logs it and closes the connection, as uvicorn does). The other pairs
that frame the body (``transfer-encoding``, ``connection``) are always handled as uvicorn
handles them. The memory is bounded (:data:`MAX_PAIRS` pairs, each line at most
:data:`MAX_PAIR_BYTES` long); when it is full it is emptied and fills again with the pairs in
use (a value that changes with each response, a request id, only makes that happen sooner).
A ``content-length`` of ASCII digits (the length of a body, which varies with the answer:
a model's outputs) needs no regular expression (digits are nothing uvicorn refuses), and is
remembered only while the memory has room: answers of ever new lengths neither empty the
memory of the other pairs nor pay uvicorn's checks.

A pair whose maker guarantees it passes those checks and frames nothing (a :class:`CheckedPair`:
the access middleware's request id, whose value changes with each response) is written as it is,
neither checked nor remembered: checked, it would cost each response the checks, and fill the
memory with pairs never seen again.

A cycle is also cheaper to make than uvicorn's (its initial state is the class's, and its
``message_event`` a :class:`Signal` that makes nothing until something waits on it), and so is
a request's scope: :func:`scope_template` holds what uvicorn puts in every scope of a
connection, and the protocol copies it per request (uvicorn builds the whole dictionary).
:func:`start_cycle` is uvicorn's ``on_headers_complete`` making a :class:`Cycle`.

A whole body after a head that gave its length (every answer Podium makes itself) is written as
uvicorn writes it, without a second coroutine for uvicorn's ``send``. Everything else of
``send`` (a body in parts, chunking, HEAD, a length that does not match, flow control, a
disconnected client, the order of messages) is uvicorn's own, as
``tests/server/test_cycle_differential.py`` pins against uvicorn's own protocol.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from typing import Any

import httptools
from uvicorn.protocols.http.flow_control import service_unavailable
from uvicorn.protocols.http.httptools_impl import (
    HEADER_RE,
    HEADER_VALUE_RE,
    STATUS_LINE,
    RequestResponseCycle,
)
from uvicorn.protocols.utils import get_client_addr, get_path_with_query_string

__all__ = [
    "MAX_PAIR_BYTES",
    "MAX_PAIRS",
    "CheckedPair",
    "Cycle",
    "Signal",
    "scope_template",
    "start_cycle",
]

#: response header pairs remembered at most (all connections of the process together)
MAX_PAIRS = 512
#: a pair longer than this (name and value) is checked every time, never remembered
MAX_PAIR_BYTES = 256

#: (name, value) as the application gave them -> the head's line for them and, for a
#: ``content-length`` pair, its length (None for the others); only pairs that passed uvicorn's
#: checks, and no other pair that frames the body
_known: dict[tuple[bytes, bytes], tuple[bytes, int | None]] = {}


#: digits of a ``content-length`` that take the digits' way in ``_check`` (fewer: any length
#: a body can have, and ``int`` reads them fast)
_LONGEST_LENGTH = 19


class CheckedPair(tuple[bytes, bytes]):
    """A response header pair (``(name, value)``, a tuple to everything else) that its maker
    guarantees would pass uvicorn's checks, with a lowercase name that frames nothing (not
    ``content-length``, ``transfer-encoding`` nor ``connection``): a :class:`Cycle` writes its
    line as it is, with no check and no memory of it. Only for values made of characters known
    to be safe (the request id's: ``server/_access.py``'s ``ID_CHARACTERS``)."""

    __slots__ = ()


def _check(pair: Any) -> tuple[bytes, int | None] | None:
    """uvicorn's checks of a response header pair: its head line and length as ``_known``
    keeps them (remembered there if small enough), or None for a pair that frames the body
    otherwise (``transfer-encoding``, ``connection``, a length ``int`` refuses); raises
    uvicorn's RuntimeError for a pair uvicorn refuses."""
    name, value = pair
    if name == b"content-length" and value.isdigit() and len(value) < _LONGEST_LENGTH:
        known: tuple[bytes, int | None] = (b"content-length: %s\r\n" % value, int(value))
        if type(pair) is tuple and len(_known) < MAX_PAIRS:
            _known[pair] = known
        return known
    if HEADER_RE.search(name):
        raise RuntimeError("Invalid HTTP header name.")
    if HEADER_VALUE_RE.search(value):
        raise RuntimeError("Invalid HTTP header value.")
    name = name.lower()
    length = None
    if name == b"content-length":
        try:
            length = int(value.decode())
        except ValueError:  # uvicorn raises it only where it reads the length: its own path
            return None
    elif name == b"transfer-encoding" or name == b"connection":
        return None
    known = (b"%s: %s\r\n" % (name, value), length)
    if type(pair) is tuple and len(known[0]) <= MAX_PAIR_BYTES:
        if len(_known) >= MAX_PAIRS:
            _known.clear()
        _known[pair] = known
    return known


class Signal:
    """What a request cycle's ``message_event`` is to uvicorn (``set``, ``clear``, ``is_set``,
    ``wait``: asyncio.Event's promises), made for nothing: asyncio.Event makes a deque of waiters
    in its ``__init__`` for every request, where a request whose body has arrived when the
    application reads it (nearly all) is never waited on. The flag and the waiters are class
    defaults until used; ``wait`` finds the loop only when it has to wait."""

    _value = False
    _waiters: list[asyncio.Future[bool]] | None = None

    def is_set(self) -> bool:
        return self._value

    def set(self) -> None:
        if not self._value:
            self._value = True
            for future in self._waiters or ():
                if not future.done():
                    future.set_result(True)

    def clear(self) -> None:
        self._value = False

    async def wait(self) -> bool:
        if self._value:
            return True
        future = asyncio.get_running_loop().create_future()
        if self._waiters is None:
            self._waiters = []
        self._waiters.append(future)
        try:
            await future
            return True
        finally:
            self._waiters.remove(future)


class Cycle(RequestResponseCycle):
    """uvicorn's request cycle; the response head's pairs checked once (see the module), and
    made from its protocol in one call: a request's initial state (uvicorn's, the same values)
    is the class's, so that making a cycle stores only what the request has of its own."""

    disconnected = False
    more_body = True
    response_started = False
    response_complete = False
    chunked_encoding: bool | None = None
    expected_content_length = 0

    def __init__(  # (uvicorn's takes eleven keywords from its protocol)
        self, protocol: Any, transport: Any, scope: Any, keep_alive: bool
    ) -> None:
        self.scope = scope
        self.transport = transport
        self.flow = protocol.flow
        self.logger = protocol.logger
        self.access_logger = protocol.access_logger
        self.access_log = protocol.access_log
        self.default_headers = protocol.server_state.default_headers
        self.message_event = Signal()  # type: ignore[assignment]
        self.on_response = protocol.on_response_complete
        self.keep_alive = keep_alive
        self.waiting_for_100_continue = protocol.expect_100_continue
        self.body = bytearray()

    async def send(self, message: Any) -> None:
        if self.response_started:
            if (
                message["type"] == "http.response.body"
                and self.chunked_encoding is False
                and not (self.response_complete or self.flow.write_paused or self.disconnected)
                and not message.get("more_body", False)
            ):
                # a whole body after a head with its length (every answer of Podium's own): what
                # uvicorn's send does for it, without its coroutine. A body of another length,
                # and a HEAD request's (written as nothing), are uvicorn's to handle.
                body = message.get("body", b"")
                if len(body) == self.expected_content_length and self.scope["method"] != "HEAD":
                    self.expected_content_length = 0
                    self.transport.write(body)
                    self.response_complete = True
                    self.message_event.set()
                    if not self.keep_alive:
                        self.transport.close()
                    self.on_response()
                    return None
            return await RequestResponseCycle.send(self, message)
        if self.flow.write_paused or self.disconnected:
            # a start uvicorn answers without writing a head: uvicorn's own
            return await RequestResponseCycle.send(self, message)
        if message["type"] != "http.response.start":
            raise RuntimeError(
                f"Expected ASGI message 'http.response.start', but got '{message['type']}'."
            )
        self.response_started = True
        self.waiting_for_100_continue = False
        status_code = message["status"]
        scope = self.scope
        if self.access_log:
            self.access_logger.info(
                '%s - "%s %s HTTP/%s" %d',
                get_client_addr(scope),
                scope["method"],
                get_path_with_query_string(scope),
                scope["http_version"],
                status_code,
            )
        content = [STATUS_LINE[status_code]]
        has_connection_close = False
        memory = _known
        for headers in (self.default_headers, message.get("headers", ())):
            for pair in headers:
                known = memory.get(pair) if type(pair) is tuple else None
                if known is None:
                    if type(pair) is CheckedPair:  # its maker checked it: written as it is
                        content.append(b"%s: %s\r\n" % pair)
                        continue
                    known = _check(pair)
                if known is not None:
                    line, length = known
                    if length is not None and self.chunked_encoding is None:
                        self.expected_content_length = length
                        self.chunked_encoding = False
                    content.append(line)
                    continue
                # a pair that frames the body: uvicorn's rules, in order with the others
                name, value = pair
                name = name.lower()
                if name == b"content-length" and self.chunked_encoding is None:
                    self.expected_content_length = int(value.decode())
                    self.chunked_encoding = False
                elif name == b"transfer-encoding" and value.lower() == b"chunked":
                    self.expected_content_length = 0
                    self.chunked_encoding = True
                elif name == b"connection":
                    connection = [token.lower().strip() for token in value.split(b",")]
                    if b"close" in connection:
                        self.keep_alive = False
                        has_connection_close = True
                content.append(b"%s: %s\r\n" % (name, value))
        if not self.keep_alive and not has_connection_close:
            content.append(b"connection: close\r\n")
        if (
            self.chunked_encoding is None
            and scope["method"] != "HEAD"
            and status_code not in (204, 304)
        ):
            self.chunked_encoding = True
            content.append(b"transfer-encoding: chunked\r\n")
        content.append(b"\r\n")
        self.transport.write(b"".join(content))


def scope_template(self: Any) -> dict[str, Any]:
    """What uvicorn's ``on_message_begin`` puts in every scope of the guarded protocol
    ``self``'s connection, made once per connection: each request's scope is a copy of it
    (uvicorn's keys in uvicorn's order), with its own ``asgi``, ``headers`` and ``state``."""
    return {
        "type": "http",
        "asgi": None,
        "http_version": "1.1",
        "server": self.server,
        "client": self.client,
        "scheme": self.scheme,
        "root_path": self.root_path,
        "headers": None,
        "state": None,
    }


def start_cycle(self: Any, transport: Any) -> None:
    """uvicorn's ``on_headers_complete`` for the guarded protocol ``self``: its request's
    cycle a :class:`Cycle` writing to ``transport`` (the protocol's cork)."""
    parser = self.parser
    scope = self.scope
    http_version = parser.get_http_version()
    scope["method"] = parser.get_method().decode("ascii")
    if http_version != "1.1":
        scope["http_version"] = http_version
    if parser.should_upgrade() and self._should_upgrade():
        return
    parsed_url = httptools.parse_url(self.url)
    raw_path = parsed_url.path
    path = raw_path.decode("ascii")
    if "%" in path:
        path = urllib.parse.unquote(path)
    root_path = self.root_path
    scope["path"] = root_path + path
    scope["raw_path"] = root_path.encode("ascii") + raw_path if root_path else raw_path
    scope["query_string"] = parsed_url.query or b""
    limit = self.limit_concurrency
    if limit is not None and (len(self.connections) >= limit or len(self.tasks) >= limit):
        app = service_unavailable
        self.logger.warning("Exceeded concurrency limit.")
    else:
        app = self.app
    existing_cycle = self.cycle
    self.cycle = cycle = Cycle(
        self, transport, scope, http_version != "1.0" and parser.should_keep_alive()
    )
    if existing_cycle is None or existing_cycle.response_complete:
        self._start_asgi_task(cycle, app)
    else:  # pipelined: queued behind the response under way
        self.flow.pause_reading()
        self.pipeline.appendleft((cycle, app))
