"""The uvicorn wrapper of ``server/_listener.py`` in process: its main loop sleeps while nothing
happens (a wake-up per ``DATE_EVERY`` for the ``Date`` header, not uvicorn's ten a second), and
still stops at once when told to."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from helpers import wait_until

from podium.server import _listener
from podium.server._limits import ConnectionGuard, ConnectionLimits
from podium.server._listener import Uvicorn, bind


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


@contextlib.asynccontextmanager
async def serving() -> AsyncIterator[tuple[Uvicorn, list[int]]]:
    """A started server, and a list that grows by one at each tick of its main loop."""
    guard = ConnectionGuard("http-test", ConnectionLimits())
    sock = bind("127.0.0.1", 0)
    server = Uvicorn(app, sock, graceful=1, guard=guard)
    ticks: list[int] = []
    on_tick = server.server.on_tick

    async def counted(counter: int) -> bool:
        ticks.append(counter)
        return await on_tick(counter)

    server.server.on_tick = counted  # type: ignore[method-assign]
    await server.start()
    try:
        yield server, ticks
    finally:
        await server.stop()


async def date_of(port: int) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        head = await reader.readuntil(b"\r\n\r\n")
    finally:
        writer.close()
    return next(line for line in head.split(b"\r\n") if line.lower().startswith(b"date:"))


@pytest.mark.anyio
async def test_an_idle_server_ticks_once_per_date_refresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_listener, "DATE_EVERY", 3600.0)
    async with serving() as (server, ticks):
        await wait_until(lambda: ticks)
        await asyncio.sleep(0.5)  # uvicorn's own loop ticks every 0.1 s: 5 more by now
        assert len(ticks) == 1
        assert ticks == [0]  # a tick whose count is a multiple of 10: it refreshes the Date
        port = server.sock.getsockname()[1]
        assert (await date_of(port)).startswith(b"date: ")


@pytest.mark.anyio
async def test_the_date_is_refreshed_every_date_every(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_listener, "DATE_EVERY", 0.01)
    async with serving() as (server, ticks):
        await wait_until(lambda: len(ticks) >= 3)
        state = server.server.server_state
        before = state.default_headers
        await wait_until(lambda: state.default_headers is not before)  # made anew each tick
        assert [name for name, _ in state.default_headers] == [b"date"]


@pytest.mark.anyio
async def test_stop_wakes_the_main_loop_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # With a main loop that only woke per DATE_EVERY, this stop would wait an hour.
    monkeypatch.setattr(_listener, "DATE_EVERY", 3600.0)
    async with serving() as (server, ticks):
        await wait_until(lambda: ticks)
        async with asyncio.timeout(5):
            await server.stop()
        assert server.task is not None and server.task.done()
        assert len(ticks) == 2  # the first, and the one that saw should_exit
        assert server.server.should_exit


@pytest.mark.anyio
async def test_should_exit_can_be_set_and_cleared() -> None:
    guard = ConnectionGuard("http-test", ConnectionLimits())
    sock = bind("127.0.0.1", 0)
    try:
        server = Uvicorn(app, sock, graceful=1, guard=guard).server
        assert server.should_exit is False
        server.should_exit = True
        assert server.should_exit is True
        server.should_exit = False
        assert server.should_exit is False
    finally:
        sock.close()
