"""Bounded connections on every HTTP listener, attacked the way slowloris, header-hog and
idle-socket clients do (loopback only, bounded in count and time). After each attack a normal
request still succeeds. The server runs with small limits so that the tests are quick."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import anyio
import httpx
import pytest
from conftest import EXAMPLES, Server, run_server

HEADER_TIMEOUT = 1.0
KEEP_ALIVE = 1.0
BODY_TIMEOUT = 1.0
MAX_HEAD = 16 * 1024
#: How much later than its deadline a timeout may be seen on a loaded machine.
SLACK = 4.0

LIMITS = (
    "--header-timeout",
    str(HEADER_TIMEOUT),
    "--keep-alive-timeout",
    str(KEEP_ALIVE),
    "--body-timeout",
    str(BODY_TIMEOUT),
    "--min-body-rate",
    "1024",
    "--max-url-size",
    "1024",
    "--max-header-size",
    str(MAX_HEAD),
    "--max-headers",
    "20",
)

INFER = "/v2/models/echo/infer"


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with run_server(EXAMPLES / "echo", args=LIMITS) as running:
        yield running


async def connect(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    parts = urlsplit(url)
    return await asyncio.open_connection(parts.hostname, parts.port)


async def until_closed(reader: asyncio.StreamReader, within: float) -> bytes:
    """Everything the server sends until it closes the connection; fails after ``within`` s."""
    received = b""
    with anyio.fail_after(within):
        while True:
            try:
                data = await reader.read(65536)
            except ConnectionError:
                return received
            if not data:
                return received
            received += data


async def close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(ConnectionError, OSError):
        await writer.wait_closed()


async def still_serves(url: str) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=10) as client:
        body = {"inputs": [{"name": "x", "datatype": "INT32", "shape": [1], "data": [7]}]}
        r = await client.post(INFER, json=body)
        assert r.status_code == 200, r.text
        assert r.json()["outputs"][0]["data"] == [7]


def status(answer: bytes) -> int:
    assert answer.startswith(b"HTTP/1.1 "), answer[:200]
    return int(answer.split(b" ", 2)[1])


async def trickle(writer: asyncio.StreamWriter, piece: bytes, every: float, times: int) -> None:
    """Send ``piece`` every ``every`` s until the server stops taking it."""
    with contextlib.suppress(ConnectionError, OSError):
        for _ in range(times):
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(every)


# -- request heads ------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_slowloris_gets_408_after_the_header_timeout(server: Server) -> None:
    reader, writer = await connect(server.url)
    started = time.monotonic()
    writer.write(b"GET /v2/health/live HTTP/1.1\r\nHost: podium\r\n")
    sender = asyncio.ensure_future(trickle(writer, b"X-Slow: 1\r\n", 0.1, 100))
    try:
        answer = await until_closed(reader, HEADER_TIMEOUT + SLACK)
    finally:
        sender.cancel()
        await close(writer)
    assert time.monotonic() - started >= HEADER_TIMEOUT * 0.9
    assert status(answer) == 408
    assert b"--header-timeout" in answer and b"connection: close" in answer
    await still_serves(server.url)


def rss(pid: int) -> int:
    """Resident memory of process ``pid`` in bytes (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


async def header_hog(url: str, most: int) -> tuple[bytes, int]:
    """Send one header of up to ``most`` bytes, 64 KiB a write, until the server answers:
    (the answer's status line, bytes sent). The server drops what it is sent after answering."""
    reader, writer = await connect(url)
    answer = asyncio.ensure_future(reader.readline())
    sent = 0
    try:
        writer.write(b"GET /v2/health/live HTTP/1.1\r\nHost: podium\r\nX-Hog: ")
        with contextlib.suppress(ConnectionError, OSError):
            while sent < most and not answer.done():
                writer.write(b"a" * 65536)
                await writer.drain()
                sent += 65536
                await asyncio.sleep(0)  # drain() may not yield: let the answer be read
        with anyio.fail_after(SLACK):
            return await answer, sent
    finally:
        answer.cancel()
        await close(writer)


@pytest.mark.anyio
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
async def test_header_hogs_get_431_and_memory_stays_bounded(server: Server) -> None:
    await still_serves(server.url)
    before = rss(server.proc.pid)
    results = await asyncio.gather(*(header_hog(server.url, 4 * 1024 * 1024) for _ in range(50)))
    after = rss(server.proc.pid)
    for answer, _ in results:
        assert answer.startswith(b"HTTP/1.1 431 "), answer
    # Unbounded, 50 hogs of 4 MiB each grew the server by hundreds of MB.
    assert after - before < 50 * 1024 * 1024, (before, after)
    await still_serves(server.url)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("request_head", "code", "flag"),
    [
        (b"GET /" + b"a" * 2000 + b" HTTP/1.1\r\nHost: podium\r\n\r\n", 414, b"--max-url-size"),
        (
            b"GET /v2 HTTP/1.1\r\n" + b"".join(b"X-%d: a\r\n" % i for i in range(30)) + b"\r\n",
            431,
            b"--max-headers",
        ),
        (
            b"GET /v2 HTTP/1.1\r\nHost: podium\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n",
            431,
            b"--max-header-size",
        ),
    ],
)
async def test_oversized_heads_are_refused_on_every_listener(
    server: Server, request_head: bytes, code: int, flag: bytes
) -> None:
    for url in (server.url, server.management_url):
        reader, writer = await connect(url)
        writer.write(request_head)
        try:
            answer = await until_closed(reader, SLACK)
        finally:
            await close(writer)
        assert status(answer) == code
        assert flag in answer
    await still_serves(server.url)


@pytest.mark.anyio
async def test_a_head_just_under_the_limits_is_served(server: Server) -> None:
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        r = await client.get("/v2/health/live", headers={"x-big": "a" * (MAX_HEAD - 1024)})
        assert r.status_code == 200
        r = await client.get("/v2/health/live?" + "q" * 900)
        assert r.status_code == 200


# -- idle connections ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_connection_that_sends_nothing_is_closed_silently(server: Server) -> None:
    reader, writer = await connect(server.url)
    started = time.monotonic()
    try:
        answer = await until_closed(reader, HEADER_TIMEOUT + SLACK)
    finally:
        await close(writer)
    assert answer == b""  # an unsolicited 408 would be read as the next request's answer
    assert time.monotonic() - started >= HEADER_TIMEOUT * 0.9
    await still_serves(server.url)


@pytest.mark.anyio
async def test_a_connection_idle_after_a_request_is_closed(server: Server) -> None:
    reader, writer = await connect(server.url)
    try:
        writer.write(b"GET /v2/health/live HTTP/1.1\r\nHost: podium\r\n\r\n")
        answer = await until_closed(reader, KEEP_ALIVE + SLACK)
    finally:
        await close(writer)
    assert status(answer) == 200


@pytest.mark.anyio
async def test_blank_lines_between_requests_do_not_keep_a_connection_open(
    server: Server,
) -> None:
    """Every byte disarmed uvicorn's keep-alive timer for good: CRLFs held a socket forever."""
    reader, writer = await connect(server.url)
    writer.write(b"GET /v2/health/live HTTP/1.1\r\nHost: podium\r\n\r\n")
    sender = asyncio.ensure_future(trickle(writer, b"\r\n", 0.2, 200))
    try:
        answer = await until_closed(reader, 2 * KEEP_ALIVE + SLACK)
    finally:
        sender.cancel()
        await close(writer)
    assert status(answer) == 200


# -- request bodies -----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_slow_body_gets_408(server: Server) -> None:
    reader, writer = await connect(server.url)
    writer.write(
        b"POST " + INFER.encode() + b" HTTP/1.1\r\nHost: podium\r\n"
        b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
    )
    sender = asyncio.ensure_future(trickle(writer, b" " * 10, 0.2, 200))
    try:
        answer = await until_closed(reader, BODY_TIMEOUT + SLACK)
    finally:
        sender.cancel()
        await close(writer)
    assert status(answer) == 408
    assert b"--min-body-rate" in answer
    await still_serves(server.url)


@pytest.mark.anyio
async def test_a_body_at_a_fair_rate_is_served(server: Server) -> None:
    """About 2.5 KiB/s, in pieces 0.4 s apart: above the minimum rate, so never cut."""
    body = json.dumps(
        {"inputs": [{"name": "x", "datatype": "INT32", "shape": [1000], "data": [1] * 1000}]}
    ).encode()
    pieces = [body[i : i + 1024] for i in range(0, len(body), 1024)]
    reader, writer = await connect(server.url)
    try:
        writer.write(
            b"POST " + INFER.encode() + b" HTTP/1.1\r\nHost: podium\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
        )
        for piece in pieces:
            await asyncio.sleep(0.4)
            writer.write(piece)
            await writer.drain()
        with anyio.fail_after(SLACK):
            line = await reader.readline()
    finally:
        await close(writer)
    assert line.startswith(b"HTTP/1.1 200 "), line
    assert len(pieces) >= 3


# -- connection count ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_max_connections_answers_503_and_recovers() -> None:
    with run_server(EXAMPLES / "echo", args=("--max-connections", "3")) as server:
        assert "at most 3 connections per HTTP listener" in server.log
        assert "open-files limit" in server.log
        held = []
        for _ in range(3):  # three keep-alive connections, each served once and kept
            reader, writer = await connect(server.url)
            writer.write(b"GET /v2/health/live HTTP/1.1\r\nHost: podium\r\n\r\n")
            with anyio.fail_after(SLACK):
                assert (await reader.readline()).startswith(b"HTTP/1.1 200 ")
            held.append(writer)
        try:
            reader, writer = await connect(server.url)
            writer.write(b"GET /v2/health/live HTTP/1.1\r\nHost: podium\r\n\r\n")
            try:
                answer = await until_closed(reader, SLACK)
            finally:
                await close(writer)
            assert status(answer) == 503
            assert b"connection: close" in answer
            await close(held.pop())
            with anyio.fail_after(SLACK):  # the freed place is taken by the next client
                while True:
                    try:
                        await still_serves(server.url)
                        break
                    except (AssertionError, httpx.HTTPError):
                        await asyncio.sleep(0.1)
        finally:
            for writer in held:
                await close(writer)
        assert "refusing new ones with 503" in server.log
