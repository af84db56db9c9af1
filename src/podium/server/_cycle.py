"""A request's cycle on the guarded protocol (``_limits.py``): uvicorn's ``RequestResponseCycle``
with a response head that costs less to write.

uvicorn checks every response header pair on every response: two regular expression searches
(the name's characters, the value's), the name lowered, three comparisons for the names that
change how the body is framed (``content-length``, ``transfer-encoding``, ``connection``), and
four pieces appended to the head. A server answers most responses with the same few pairs
(``date`` for a second, ``content-type``, a route's own headers): :class:`Cycle` remembers the
line (``name: value\\r\\n``, the name lowered) of each pair that passed those checks and frames
nothing, so that the next response with the same pair appends that line after one dictionary
look-up. Pairs uvicorn refuses are never remembered: each is checked again, and refused with
uvicorn's own exception and message (its request cycle then logs it and closes the
connection, as uvicorn does). The pairs that frame the body are always handled as uvicorn
handles them. The memory is bounded (:data:`MAX_PAIRS` pairs, each at most
:data:`MAX_PAIR_BYTES` long); when it is full it is emptied and fills again with the pairs in
use (a value that changes with each response, a request id, only makes that happen sooner).

Everything else of ``send`` (the body, chunking, HEAD, the length's checks, flow control, a
disconnected client, the order of messages) is uvicorn's behaviour, as
``tests/server/test_cycle_differential.py`` pins against uvicorn's own protocol.
"""

from __future__ import annotations

from typing import Any

from uvicorn.protocols.http.httptools_impl import (
    HEADER_RE,
    HEADER_VALUE_RE,
    STATUS_LINE,
    RequestResponseCycle,
)
from uvicorn.protocols.utils import get_client_addr, get_path_with_query_string

__all__ = ["MAX_PAIR_BYTES", "MAX_PAIRS", "Cycle"]

#: response header pairs remembered at most (all connections of the process together)
MAX_PAIRS = 512
#: a pair longer than this (name and value) is checked every time, never remembered
MAX_PAIR_BYTES = 256

#: (name, value) as the application gave them -> the head's line for them; only pairs that
#: passed uvicorn's checks and do not frame the body
_lines: dict[tuple[bytes, bytes], bytes] = {}

#: lowered names whose pairs change how the body is framed or the connection kept
_FRAMING = frozenset((b"content-length", b"transfer-encoding", b"connection"))


def _line(pair: Any) -> bytes | None:
    """The head's line for a pair that frames nothing (remembered if small enough), or None
    for a framing pair; raises uvicorn's RuntimeError for a pair uvicorn refuses."""
    name, value = pair
    if HEADER_RE.search(name):
        raise RuntimeError("Invalid HTTP header name.")
    if HEADER_VALUE_RE.search(value):
        raise RuntimeError("Invalid HTTP header value.")
    lowered = name.lower()
    if lowered in _FRAMING:
        return None
    line = b"%s: %s\r\n" % (lowered, value)
    if type(pair) is tuple and len(line) <= MAX_PAIR_BYTES:
        if len(_lines) >= MAX_PAIRS:
            _lines.clear()
        _lines[pair] = line
    return line


class Cycle(RequestResponseCycle):
    """uvicorn's request cycle; the response head's pairs checked once (see the module)."""

    async def send(self, message: Any) -> None:
        if self.response_started or self.flow.write_paused or self.disconnected:
            # a body, or a start uvicorn answers without writing a head: uvicorn's own
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
        lines = _lines
        for headers in (self.default_headers, message.get("headers", ())):
            for pair in headers:
                line = lines.get(pair) if type(pair) is tuple else None
                if line is None:
                    line = _line(pair)
                if line is not None:
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
