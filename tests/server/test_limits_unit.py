"""The connection limits in process: the guarded uvicorn wrapper on a loopback socket with a tiny
ASGI app (statistics, the finer rules of counting and timing), the start-up checks, and how the
limits flow from flags and config files into ``ServerConfig``."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import click
import pytest
from helpers import wait_until

from podium.cli import _merge
from podium.config import ServerConfig
from podium.server import _limits, _limits_setup
from podium.server._limits import (
    ConnectionGuard,
    ConnectionLimits,
    check_uvicorn,
    default_max_connections,
)
from podium.server._listener import Uvicorn, bind

PATIENCE = 5.0
RELEASE: list[asyncio.Event] = []  # ``/gated`` reads its body once the test sets this event
HOOKED: list[Any] = []  # ``/hooked``'s LostHook
LEFT: list[str] = []  # the paths whose LostHook called back


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers 200 with the request body; ``/late`` waits before reading the body."""
    if scope["type"] != "http":
        return
    if scope["path"] == "/hooked":  # waits for its client to leave, told by its LostHook
        hook = scope[_limits.LOST_HOOK]
        HOOKED.append(hook)
        hook.callback = lambda: LEFT.append(scope["path"])
        await asyncio.Event().wait()
    if scope["path"] == "/task":  # its LostHook names the task serving it
        ours = scope[_limits.LOST_HOOK].task is asyncio.current_task()
        await receive()
        body = b"yes" if ours else b"no"
        headers = [(b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        return
    if scope["path"] == "/late":
        await asyncio.sleep(1.5)
    elif scope["path"] == "/gated":
        await RELEASE[0].wait()
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    headers = [(b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@contextlib.asynccontextmanager
async def serving(**limits: Any) -> AsyncIterator[tuple[ConnectionGuard, int]]:
    guard = ConnectionGuard("http-test", ConnectionLimits(**limits))
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    server = Uvicorn(app, sock, graceful=1, guard=guard)
    await server.start()
    try:
        yield guard, port
    finally:
        await server.stop()


async def connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


async def response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """One response with a content-length: (status, body)."""
    with anyio.fail_after(PATIENCE):
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        return int(head.split(b" ")[1]), await reader.readexactly(length)


async def closed(reader: asyncio.StreamReader) -> bytes:
    received = b""
    with anyio.fail_after(PATIENCE):
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                received += data
    return received


async def shut(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(ConnectionError, OSError):
        await writer.wait_closed()


async def eventually(check: Any) -> None:
    with anyio.fail_after(PATIENCE):
        while not check():  # noqa: ASYNC110 (the guard's counters have no event to wait on)
            await asyncio.sleep(0.01)


GET = b"GET / HTTP/1.1\r\nHost: t\r\n\r\n"


@pytest.mark.anyio
async def test_statistics_count_what_the_limits_did() -> None:
    async with serving(max_connections=2, header_timeout=0.3, max_url_size=100) as (guard, port):
        kept = []
        for _ in range(2):
            reader, writer = await connect(port)
            writer.write(GET)
            assert (await response(reader))[0] == 200
            kept.append(writer)
        stats = guard.statistics()
        assert (stats.open, stats.accepted, stats.max_connections) == (2, 2, 2)

        reader, writer = await connect(port)  # one too many
        assert (await closed(reader)).startswith(b"HTTP/1.1 503 ")
        await shut(writer)
        assert guard.statistics().refused == 1
        assert guard.statistics().open == 2

        await shut(kept.pop())
        await eventually(lambda: guard.statistics().open == 1)
        reader, writer = await connect(port)  # says nothing: closed silently
        assert await closed(reader) == b""
        await shut(writer)
        reader, writer = await connect(port)
        writer.write(b"GET /" + b"a" * 200 + b" HTTP/1.1\r\n\r\n")
        assert (await closed(reader)).startswith(b"HTTP/1.1 414 ")
        await shut(writer)
        await eventually(lambda: guard.statistics().open == 1)
        reader, writer = await connect(port)
        writer.write(b"NOT HTTP AT ALL\r\n\r\n")
        assert (await closed(reader)).startswith(b"HTTP/1.1 400 ")
        await shut(writer)
        await shut(kept.pop())
        await eventually(lambda: guard.statistics().open == 0)
        stats = guard.statistics()
        assert (stats.accepted, stats.refused, stats.header_timeouts) == (5, 1, 1)
        assert (stats.oversized_heads, stats.bad_requests, stats.listener) == (1, 1, "http-test")


@pytest.mark.anyio
async def test_an_unfinished_head_is_refused_as_it_grows() -> None:
    """Refused past the limit while it is still arriving (httptools would buffer it all), long
    before the header timeout."""
    async with serving(max_header_size=16 * 1024, header_timeout=30) as (guard, port):
        reader, writer = await connect(port)
        writer.write(b"GET / HTTP/1.1\r\nX-Long: ")
        with contextlib.suppress(ConnectionError):
            for _ in range(40):
                writer.write(b"a" * 1024)
                await writer.drain()
                await asyncio.sleep(0.01)
        assert (await closed(reader)).startswith(b"HTTP/1.1 431 ")
        await shut(writer)
        assert guard.statistics().oversized_heads == 1


@pytest.mark.anyio
async def test_a_pipelined_head_is_not_charged_with_the_body_before_it() -> None:
    """A 100 KiB body and the start of the next request may come in one read: the head limit
    (16 KiB) counts only the head."""
    async with serving(max_header_size=16 * 1024) as (guard, port):
        reader, writer = await connect(port)
        body = b"b" * (100 * 1024)
        second = b"GET /two HTTP/1.1\r\nHost: t\r\nX-Pad: " + b"p" * 8000 + b"\r\n\r\n"
        writer.write(
            b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % len(body)
            + body
            + second[:100]
        )
        await asyncio.sleep(0.2)
        writer.write(second[100:])
        assert await response(reader) == (200, body)
        assert await response(reader) == (200, b"")
        await shut(writer)
        assert guard.statistics().oversized_heads == 0


@pytest.mark.anyio
async def test_100_continue_sent_just_before_a_window_closes_leaves_the_client_a_whole_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The application asks for the body (uvicorn sends 100 Continue) 0.1 s before a body window
    closes; the client answers 0.2 s later. That window is not the client's to account for: it
    gets the whole next one."""
    deadlines: list[float] = []
    wait = _limits._GuardedProtocol._wait

    def recording(self: Any, what: Any, seconds: float) -> None:
        wait(self, what, seconds)
        if what is _limits._Wait.BODY:
            deadlines.append(self.loop.time() + seconds)

    monkeypatch.setattr(_limits._GuardedProtocol, "_wait", recording)
    RELEASE[:] = [asyncio.Event()]
    loop = asyncio.get_running_loop()
    async with serving(body_timeout=0.5, min_body_rate=1024) as (guard, port):
        reader, writer = await connect(port)
        writer.write(
            b"POST /gated HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"
        )
        await wait_until(lambda: deadlines, PATIENCE, what="a body window")
        await asyncio.sleep(max(0.0, deadlines[-1] - loop.time() - 0.1))
        RELEASE[0].set()
        with anyio.fail_after(PATIENCE):
            assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
        await asyncio.sleep(0.2)
        writer.write(b"hello")
        assert await response(reader) == (200, b"hello")
        await shut(writer)
        assert guard.statistics().slow_bodies == 0


@pytest.mark.anyio
async def test_a_body_waiting_on_the_application_is_not_the_clients_fault() -> None:
    """``/late`` reads its body 1.5 s after the head: the client that sent half of it and then
    paused is not judged while what it sent is unread, nor while it waits for 100 Continue."""
    async with serving(body_timeout=0.3, min_body_rate=1024) as (guard, port):
        reader, writer = await connect(port)
        writer.write(
            b"POST /late HTTP/1.1\r\nHost: t\r\nContent-Length: 2000\r\n\r\n" + b"x" * 1000
        )
        await asyncio.sleep(1.2)
        writer.write(b"x" * 1000)
        assert await response(reader) == (200, b"x" * 2000)

        writer.write(
            b"POST /late HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"
        )
        with anyio.fail_after(PATIENCE):
            assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(b"hello")
        assert await response(reader) == (200, b"hello")
        await shut(writer)
        assert guard.statistics().slow_bodies == 0


@pytest.mark.anyio
async def test_a_stalled_body_is_closed_even_without_a_minimum_rate() -> None:
    async with serving(body_timeout=0.3, min_body_rate=0) as (guard, port):
        reader, writer = await connect(port)
        writer.write(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nabc")
        assert (await closed(reader)).startswith(b"HTTP/1.1 408 ")
        await shut(writer)
        assert guard.statistics().slow_bodies == 1


@pytest.mark.anyio
async def test_refusals_are_logged_at_most_once_per_period(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with serving(max_url_size=10) as (guard, port):
        for _ in range(3):
            reader, writer = await connect(port)
            writer.write(b"GET /" + b"a" * 20 + b" HTTP/1.1\r\n\r\n")
            await closed(reader)
            await shut(writer)
        assert guard.statistics().oversized_heads == 3
    logged = [r for r in caplog.records if "--max-url-size" in r.getMessage()]
    assert len(logged) == 1
    assert logged[0].getMessage().startswith("http-test: request target longer than 10 bytes")


# -- start-up -----------------------------------------------------------------------------------


def test_a_uvicorn_without_the_needed_internals_fails_at_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    check_uvicorn()  # the installed one has them
    monkeypatch.setattr(_limits_setup, "_METHODS", (*_limits_setup._METHODS, "no_such_method"))
    with pytest.raises(RuntimeError, match="no_such_method.*tested with"):
        ConnectionGuard("http-test", ConnectionLimits())


def test_default_max_connections_fits_the_open_files_limit() -> None:
    assert default_max_connections(None) == 1000
    assert default_max_connections(-1) == 1000  # unlimited
    assert default_max_connections(1_048_576) == 1000
    assert default_max_connections(1024) == (1024 - 256) // 5  # 3 HTTP + 2 gRPC listeners
    assert default_max_connections(100) == 16


@pytest.mark.skipif(sys.platform == "win32", reason="no RLIMIT_NOFILE")
def test_the_soft_open_files_limit_is_raised_to_the_hard_one() -> None:
    code = (
        "import resource\n"
        "from podium.server._limits import raise_open_files_limit\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))\n"
        "print(raise_open_files_limit(), min(256, hard), hard)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    result, low, hard = out.rsplit(" ", 2)
    assert result == f"({low}, {hard.strip()})"


# -- configuration ------------------------------------------------------------------------------


def test_limits_have_deliberate_defaults() -> None:
    config = ServerConfig()
    assert (config.http.max_url_size, config.http.max_header_size, config.http.max_headers) == (
        8192,
        65536,
        100,
    )
    assert (config.http.header_timeout, config.http.keep_alive_timeout) == (10.0, 30.0)
    assert (config.http.body_timeout, config.http.min_body_rate, config.http.max_connections) == (
        10.0,
        1024,
        None,
    )
    defaults = ConnectionLimits()
    assert defaults.max_header_size == config.http.max_header_size
    assert defaults.header_timeout == config.http.header_timeout


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("max_url_size", 0, "max-url-size must be an integer >= 1"),
        ("max_header_size", "64k", "max-header-size must be an integer >= 1"),
        ("max_headers", True, "max-headers must be an integer >= 1"),
        ("min_body_rate", -1, "min-body-rate must be an integer >= 0"),
        ("header_timeout", 0, "header-timeout must be a number of seconds > 0"),
        ("keep_alive_timeout", float("nan"), "keep-alive-timeout must be a number of seconds"),
        ("body_timeout", float("inf"), "body-timeout must be a number of seconds"),
        ("max_connections", 0, "max-connections must be an integer >= 1"),
    ],
)
def test_invalid_limits_name_the_flag(key: str, value: Any, fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        ServerConfig(**{key: value})
    assert fragment in str(info.value)
    assert repr(value) in str(info.value)


def test_limits_come_from_flags_and_config_files(tmp_path: Path) -> None:
    config = tmp_path / "podium.yaml"
    config.write_text("header-timeout: 3\nmax_connections: 50\nmin-body-rate: 0\n")
    merged = _merge(config, {"max_headers": 7, "header_timeout": None})
    assert merged.http.header_timeout == 3.0 and isinstance(merged.http.header_timeout, float)
    assert (merged.http.max_connections, merged.http.min_body_rate, merged.http.max_headers) == (
        50,
        0,
        7,
    )
    assert _merge(config, {"header_timeout": 0.5}).http.header_timeout == 0.5
    with pytest.raises(click.UsageError, match="body-timeout"):
        _merge(None, {"body_timeout": -1.0})


class _Writes:
    """A transport that keeps each write apart."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> str:
        return f"info:{name}"


@pytest.mark.anyio
async def test_a_response_head_goes_out_with_its_first_body_write() -> None:
    transport = _Writes()
    cork = _limits._Cork(transport, asyncio.get_running_loop())  # type: ignore[arg-type]
    cork.armed = True  # a response begins
    cork.write(b"HEAD")
    assert transport.writes == []
    cork.write(b"BODY")
    cork.write(b"MORE")
    assert transport.writes == [b"HEADBODY", b"MORE"]
    # a head whose body comes later (a stream) goes out at the end of the loop's turn
    cork.armed = True
    cork.write(b"HEAD2")
    await asyncio.sleep(0)
    assert transport.writes[-1] == b"HEAD2"
    cork.write(b"CHUNK")
    assert transport.writes[-1] == b"CHUNK"
    # closing writes what is held first; the rest is the transport's own
    cork.armed = True
    cork.write(b"HEAD3")
    cork.close()
    assert transport.writes[-1] == b"HEAD3" and transport.closed
    assert cork.get_extra_info("peername") == "info:peername"


def test_uvicorn_cycles_write_through_the_cork() -> None:
    # the guarded protocol sets each request cycle's transport: the attribute must exist
    check_uvicorn()
    assert "transport" in _limits_setup._NEEDED[2][1]


@pytest.mark.anyio
async def test_a_lost_connection_calls_its_requests_lost_hook_once() -> None:
    HOOKED.clear()
    LEFT.clear()
    async with serving() as (_, port):
        reader, writer = await connect(port)
        writer.write(b"GET /hooked HTTP/1.1\r\nHost: t\r\n\r\n")
        await eventually(lambda: len(HOOKED) == 1)
        assert LEFT == []
        await shut(writer)  # the client leaves
        await eventually(lambda: LEFT == ["/hooked"])
        assert HOOKED[0].callback is None  # called once, then forgotten
        # a connection whose request was answered calls nothing when it closes
        reader, writer = await connect(port)
        writer.write(GET)
        assert (await response(reader))[0] == 200
        await shut(writer)
        await asyncio.sleep(0.1)
        assert LEFT == ["/hooked"]


@pytest.mark.anyio
async def test_a_requests_lost_hook_carries_the_task_serving_it() -> None:
    """The task the protocol started for each request, pipelined ones too (started when the
    response before them completes): what ``Exchange.watch`` cancels when the client leaves."""
    async with serving() as (_, port):
        reader, writer = await connect(port)
        writer.write(b"GET /task HTTP/1.1\r\nHost: t\r\n\r\n" * 3)  # pipelined
        assert [await response(reader) for _ in range(3)] == [(200, b"yes")] * 3
        await shut(writer)


@pytest.mark.anyio
async def test_a_connection_keeps_one_keep_alive_timer_across_its_requests() -> None:
    """The keep-alive timer is made at a response where none is armed, not at every response;
    when it rings it closes the connection only if it has been idle since its last response for
    keep_alive_timeout, else it waits for the rest (or lapses while a request is under way)."""
    guard = ConnectionGuard("http-test", ConnectionLimits(keep_alive_timeout=600))
    sock = bind("127.0.0.1", 0)
    server = Uvicorn(app, sock, graceful=1, guard=guard)
    await server.start()
    try:
        reader, writer = await connect(sock.getsockname()[1])
        writer.write(GET)
        assert (await response(reader))[0] == 200
        (protocol,) = server.server.server_state.connections
        timer = protocol.timeout_keep_alive_task
        assert timer is not None
        for _ in range(3):
            writer.write(GET)
            assert (await response(reader))[0] == 200
            assert protocol.timeout_keep_alive_task is timer  # not remade per request
        loop = asyncio.get_running_loop()
        # it rings while the connection has been idle for less than the timeout: again, later
        timer.cancel()  # (rung)
        protocol._keep_alive_rang()
        again = protocol.timeout_keep_alive_task
        assert again is not None and again is not timer
        assert not protocol.transport.is_closing()
        # it rings while a request is under way (bytes arrived since the last response): lapses
        protocol._idle_since = None
        protocol._keep_alive_rang()
        assert protocol.timeout_keep_alive_task is None
        again.cancel()
        assert not protocol.transport.is_closing()
        writer.write(GET)  # the next response arms it again
        assert (await response(reader))[0] == 200
        assert protocol.timeout_keep_alive_task is not None
        # it rings after keep_alive_timeout of idleness: closed, and counted
        protocol._idle_since = loop.time() - 601
        protocol._keep_alive_rang()
        assert await closed(reader) == b""
        assert guard.idle_timeouts == 1
        await shut(writer)
    finally:
        await server.stop()
