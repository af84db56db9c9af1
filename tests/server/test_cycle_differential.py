"""uvicorn's HTTP behaviour is kept by Podium's guarded protocol: a table of raw HTTP exchanges,
each sent over a real socket to one ASGI app served by plain uvicorn (``HttpToolsProtocol``)
and by the guarded protocol of a :class:`~podium.server._limits.ConnectionGuard`, must give
byte-identical responses (the ``date`` header aside), the same messages seen by the
application and the same lines in uvicorn's log.

Every exchange is within the guard's limits (the limits' own answers are
``test_limits_unit.py``'s and ``test_http_limits.py``'s). It runs on uvloop (what Podium
serves on) and on asyncio's own loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import uvicorn
import uvloop
from helpers import wait_until
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from podium.config import ConnectionLimits
from podium.server._limits import ConnectionGuard
from podium.server._listener import bind

PATIENCE = 5.0
SEEN: dict[str, list[Any]] = {}  # per case: the request messages the application received
SCOPES: list[tuple[Any, ...]] = []  # every request's scope and the mutable things in it
_DATE = re.compile(rb"\r\ndate: [^\r]*", re.IGNORECASE)

Send = Callable[[dict[str, Any]], Awaitable[None]]


async def _start(send: Send, status: int, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})


async def app(scope: dict[str, Any], receive: Any, send: Send) -> None:
    """One behaviour per path; records what ``receive`` gave under the ``x-case`` header."""
    if scope["type"] != "http":
        return
    case = dict(scope["headers"]).get(b"x-case", b"").decode()
    seen = SEEN.setdefault(case, [])
    SCOPES.append((scope, scope["asgi"], scope["state"], scope["headers"]))
    path = scope["path"]
    # what the application sees of the request, kept: the scope but for addresses and state
    seen.append(
        (
            scope["method"],
            scope["http_version"],
            scope["path"],
            scope["raw_path"],
            scope["query_string"],
            scope["root_path"],
            scope["scheme"],
            scope["headers"],
            scope["asgi"],
        )
    )
    body = b""
    if path != "/early":
        while True:
            message = await receive()
            # one entry for a run of body parts: how many parts a body arrives in is the
            # transport's timing (the reads the load on the machine splits it into), not the
            # protocol's; the body itself is echoed and compared byte for byte
            if message["type"] != "http.request" or not seen or seen[-1] != "http.request":
                seen.append(message["type"])
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
    if path == "/end":  # the last request of an exchange: what came before was answered
        await _start(send, 200, [(b"content-length", b"0"), (b"x-end", b"1")])
        await send({"type": "http.response.body"})
        return
    if path == "/raise":
        raise ValueError("the application failed")
    if path == "/nothing":
        return
    if path == "/result":
        return 1  # type: ignore[return-value]
    if path == "/bad-name":
        await _start(send, 200, [(b"x (bad)", b"1"), (b"content-length", b"0")])
    if path == "/bad-value":
        await _start(send, 200, [(b"x-bad", b"a\x01b"), (b"content-length", b"0")])
    if path == "/tab-value":  # a tab is allowed in a value
        await _start(send, 200, [(b"x-tab", b"a\tb"), (b"content-length", b"0")])
        await send({"type": "http.response.body"})
        return
    if path == "/chunked":  # no content-length: uvicorn chunks the body
        await _start(send, 200, [(b"content-type", b"text/plain")])
        await send({"type": "http.response.body", "body": b"one", "more_body": True})
        await asyncio.sleep(0)
        await send({"type": "http.response.body", "body": b"", "more_body": True})
        await send({"type": "http.response.body", "body": b"two"})
        return
    if path == "/te":  # the application's own transfer-encoding
        await _start(send, 200, [(b"Transfer-Encoding", b"Chunked")])
        await send({"type": "http.response.body", "body": b"abc"})
        return
    if path == "/odd-headers":  # a pair as a list; a length after a chunked encoding: unread
        odd: list[Any] = [[b"x-list", b"1"], (b"Transfer-Encoding", b"chunked")]
        await _start(send, 200, [*odd, (b"content-length", b"x"), (b"Content-Length", b"1")])
        await send({"type": "http.response.body", "body": b"abc"})
        return
    if path == "/bad-length":
        await _start(send, 200, [(b"content-length", b"abc")])
        await send({"type": "http.response.body", "body": b"abc"})
        return
    if path == "/close":
        await _start(send, 200, [(b"content-length", b"2"), (b"Connection", b"Keep-Alive, CLOSE")])
        await send({"type": "http.response.body", "body": b"ok"})
        return
    if path == "/204":
        await _start(send, 204, [])
        await send({"type": "http.response.body"})
        return
    if path == "/short":
        await _start(send, 200, [(b"content-length", b"10")])
        await send({"type": "http.response.body", "body": b"abc"})
        return
    if path == "/long":
        await _start(send, 200, [(b"content-length", b"2")])
        await send({"type": "http.response.body", "body": b"abc"})
        return
    if path == "/after":  # a message after the response
        await _start(send, 200, [(b"content-length", b"0")])
        await send({"type": "http.response.body"})
        await send({"type": "http.response.body"})
        return
    if path == "/wrong":  # a body before the start
        await send({"type": "http.response.body", "body": b"x"})
        return
    if path == "/stream":  # the head, then the body a few turns later
        await _start(send, 200, [(b"Content-Length", b"6"), (b"X-Mixed-Case", b"Value")])
        for _ in range(3):
            await asyncio.sleep(0)
        await send({"type": "http.response.body", "body": b"abc", "more_body": True})
        await asyncio.sleep(0)
        await send({"type": "http.response.body", "body": b"def"})
        return
    if path == "/big":  # a response past the transport's high-water mark (flow control)
        size = 4 * 1024 * 1024
        await _start(send, 200, [(b"content-length", str(size).encode())])
        for _ in range(4):
            await send(
                {"type": "http.response.body", "body": b"x" * (size // 4), "more_body": True}
            )
        await send({"type": "http.response.body"})
        return
    headers = [
        (b"content-type", b"application/octet-stream"),
        (b"content-length", str(len(body)).encode()),
        (b"x-request-id", case.encode()),
    ]
    await _start(send, 200, headers)
    await send({"type": "http.response.body", "body": body})


@dataclass(frozen=True)
class Until:
    """Read until the bytes received hold ``marker`` ``count`` times."""

    marker: bytes
    count: int = 1


#: a last step: the server closes the connection (read to its end, send no END)
CLOSES = "closes"

#: sent after an exchange's steps where the connection stays open: its answer is the end
END = b"GET /end HTTP/1.1\r\nhost: t\r\n\r\n"


@dataclass(frozen=True)
class Seen:
    """Wait until the application has recorded ``count`` items for this case."""

    count: int


def post(path: str, body: bytes, *extra: bytes) -> bytes:
    head = b"POST %s HTTP/1.1\r\nhost: t\r\ncontent-length: %d\r\n" % (path.encode(), len(body))
    return head + b"".join(h + b"\r\n" for h in extra) + b"\r\n" + body


CHUNKED_BODY = b"POST /echo HTTP/1.1\r\nhost: t\r\ntransfer-encoding: chunked\r\n\r\n"
BIG = b"y" * 300_000  # past uvicorn's HIGH_WATER_LIMIT: reading is paused and resumed

#: name -> the steps of one connection: bytes to send, Until to read, Seen to wait for; then
#: END is sent and its answer read (or, after CLOSES, the server's close), and the client
#: closes (a half-close would race the server's answers)
EXCHANGES: dict[str, list[Any]] = {
    "echo": [post("/echo", b"[1, 2, 3, 4]")],
    "get": [b"GET /echo?a=1&b=%20 HTTP/1.1\r\nHost: t\r\nAccept: */*\r\n\r\n"],
    "quoted path": [b"GET /a%20b/%2F?q HTTP/1.1\r\nhost: t\r\n\r\n"],
    "head": [b"HEAD /echo HTTP/1.1\r\nhost: t\r\n\r\n"],
    "head chunked": [b"HEAD /chunked HTTP/1.1\r\nhost: t\r\n\r\n"],
    "keep-alive": [post("/echo", b"one"), Until(b"one"), post("/echo", b"two")],
    "pipelined": [post("/echo", b"one") + post("/stream", b"") + post("/echo", b"three")],
    "pipelined then more": [post("/echo", b"1") + post("/echo", b"2"), Until(b"\r\n2")],
    "http/1.0": [b"GET /echo HTTP/1.0\r\n\r\n", CLOSES],
    "http/1.0 keep-alive": [b"GET /echo HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"],
    "connection close": [post("/echo", b"x", b"Connection: close") + post("/echo", b"y"), CLOSES],
    "expect 100": [
        post("/echo", b"", b"expect: 100-continue").replace(b"length: 0", b"length: 4"),
        Until(b"100 Continue"),
        b"body",
    ],
    "expect 100 early answer": [
        post("/early", b"", b"Expect: 100-Continue").replace(b"length: 0", b"length: 4"),
        Until(b"x-request-id"),  # then END is read as the body and a bad request: 400
    ],
    "chunked request": [CHUNKED_BODY + b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"],
    "chunked request in parts": [
        CHUNKED_BODY + b"3\r\nab",
        Seen(2),
        b"c\r\n",
        b"1\r\nd\r\n0\r\n\r\n",
    ],
    "body in parts": [post("/echo", b"abcdef")[:-3], Seen(2), b"def"],
    "big body": [post("/echo", BIG)],
    "big response": [b"GET /big HTTP/1.1\r\nhost: t\r\n\r\n"],
    "chunked response": [b"GET /chunked HTTP/1.1\r\nhost: t\r\n\r\n"],
    "own transfer-encoding": [b"GET /te HTTP/1.1\r\nhost: t\r\n\r\n"],
    "application closes": [b"GET /close HTTP/1.1\r\nhost: t\r\n\r\n" + post("/echo", b"z"), CLOSES],
    "odd headers": [b"GET /odd-headers HTTP/1.1\r\nhost: t\r\n\r\n"] * 2,
    "bad content-length": [b"GET /bad-length HTTP/1.1\r\nhost: t\r\n\r\n", CLOSES],
    "204": [b"GET /204 HTTP/1.1\r\nhost: t\r\n\r\n"],
    "stream": [b"GET /stream HTTP/1.1\r\nhost: t\r\n\r\n"],
    "tab in a value": [b"GET /tab-value HTTP/1.1\r\nhost: t\r\n\r\n"],
    "bad header name": [b"GET /bad-name HTTP/1.1\r\nhost: t\r\n\r\n", CLOSES],
    "bad header value": [b"GET /bad-value HTTP/1.1\r\nhost: t\r\n\r\n", CLOSES],
    "bad header name again": [b"GET /bad-name HTTP/1.1\r\nhost: t\r\n\r\n", CLOSES],
    "bad header value again": [b"GET /bad-value HTTP/1.1\r\nhost: t\r\n\r\n", CLOSES],
    "application raises": [b"GET /raise HTTP/1.1\r\nhost: t\r\n\r\n", CLOSES],
    "no response": [b"GET /nothing HTTP/1.1\r\nhost: t\r\n\r\n", CLOSES],
    "returns a value": [b"GET /result HTTP/1.1\r\nhost: t\r\n\r\n", CLOSES],
    "body shorter than its length": [b"GET /short HTTP/1.1\r\nhost: t\r\n\r\n", CLOSES],
    "body longer than its length": [b"GET /long HTTP/1.1\r\nhost: t\r\n\r\n", CLOSES],
    "message after the response": [b"GET /after HTTP/1.1\r\nhost: t\r\n\r\n", CLOSES],
    "body before the start": [b"GET /wrong HTTP/1.1\r\nhost: t\r\n\r\n", CLOSES],
    "invalid request": [b"GET /echo HTTP/1.1\r\nhost: t\r\nbad header\r\n\r\n", CLOSES],
    "client leaves mid-body": [post("/echo", b"abcdef")[:-3], Seen(2)],
}


def _with_case(name: str, steps: list[Any]) -> list[Any]:
    """Each request head names its case (``x-case``), so the application records it there."""
    tag = b"\r\nx-case: " + name.encode()
    return [
        re.sub(rb"(HTTP/1\.[01])(?=\r\n)", rb"\1" + tag.replace(b"\\", b"\\\\"), s)
        if isinstance(s, bytes)
        else s
        for s in steps
    ]


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg == "Invalid HTTP request received.":
            return  # the guard logs its 400s itself, at most once per 10 s (test_limits_unit)
        error = record.exc_info[1] if record.exc_info else None
        self.lines.append(f"{record.levelname} {record.getMessage()} {error!r}")


async def _exchange(port: int, name: str, steps: list[Any]) -> bytes:
    loop = asyncio.get_running_loop()
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setblocking(False)
    received = b""

    async def read_until(done: Callable[[], bool]) -> None:
        nonlocal received
        async with asyncio.timeout(PATIENCE):
            while not done():
                data = await loop.sock_recv(sock, 65536)
                if not data:
                    return
                received += data

    steps = steps if steps[-1] is CLOSES or name == "client leaves mid-body" else [*steps, END]
    try:
        for step in _with_case(name, steps):
            if isinstance(step, bytes):
                await loop.sock_sendall(sock, step)
            elif step is CLOSES:
                await read_until(lambda: False)  # to the server's close
            elif isinstance(step, Until):
                await read_until(lambda s=step: received.count(s.marker) >= s.count)  # type: ignore[misc]
            else:
                await wait_until(lambda s=step: len(SEEN.get(name, ())) >= s.count)
        if name == "client leaves mid-body":
            sock.close()  # at once: the application is told http.disconnect
            await wait_until(lambda: len(SEEN.get(name, ())) >= 3)
            return received
        if steps[-1] is END:
            await read_until(lambda: b"x-end: 1" in received)
    finally:
        sock.close()
    return received


async def _serve_all(http: type[HttpToolsProtocol]) -> dict[str, Any]:
    """Every exchange against one server; what each gave: the bytes, the application's view,
    uvicorn's log lines."""
    config = uvicorn.Config(
        app,
        loop="none",
        lifespan="off",
        log_config=None,
        access_log=False,
        server_header=False,
        timeout_keep_alive=30,
        http=http,
    )
    server = _Server(config)
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    task = asyncio.get_running_loop().create_task(server.serve(sockets=[sock]))
    lines = _Lines()
    error_log = logging.getLogger("uvicorn.error")
    error_log.addHandler(lines)
    results: dict[str, Any] = {}
    try:
        await wait_until(lambda: server.started)
        SEEN.clear()
        for name, steps in EXCHANGES.items():
            lines.lines.clear()
            received = await _exchange(port, name, steps)
            await asyncio.sleep(0.01)  # the server's last lines for this connection
            results[name] = (_DATE.sub(b"\r\ndate: -", received), SEEN.get(name), list(lines.lines))
    finally:
        error_log.removeHandler(lines)
        server.should_exit = True
        await task
    return results


class _Server(uvicorn.Server):
    def capture_signals(self) -> Any:  # the test's process keeps its signals
        return contextlib.nullcontext()


def _differential(loop_factory: Callable[[], asyncio.AbstractEventLoop]) -> None:
    guard = ConnectionGuard("differential", ConnectionLimits(keep_alive_timeout=30))
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        plain = runner.run(_serve_all(HttpToolsProtocol))
        guarded = runner.run(_serve_all(guard.protocol))
    for name in EXCHANGES:
        assert guarded[name] == plain[name], name
    # every request has its own scope, and its own asgi, state and headers in it
    assert SCOPES and all(
        len({id(o) for o in objects}) == len(SCOPES) for objects in zip(*SCOPES, strict=True)
    )
    SCOPES.clear()
    # the table did reach what it is meant to
    assert b"HTTP/1.1 100 Continue" in plain["expect 100"][0]
    assert plain["pipelined"][0].count(b"HTTP/1.1 200 OK") == 3 + 1  # and END's
    assert plain["bad header value"][2], "uvicorn logs a refused response header"
    assert "http.disconnect" in plain["client leaves mid-body"][1]
    assert BIG + b"HTTP/1.1 200 OK" in plain["big body"][0]
    assert guard.statistics().accepted == len(EXCHANGES)


def test_the_guarded_protocol_answers_as_uvicorn_on_uvloop() -> None:
    _differential(uvloop.new_event_loop)


def test_the_guarded_protocol_answers_as_uvicorn_on_asyncio() -> None:
    _differential(asyncio.new_event_loop)
