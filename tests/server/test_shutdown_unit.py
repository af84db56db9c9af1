"""The shutdown sequence (``server._shutdown``) with fake listeners and a real data plane: the
order of its steps and their timing, the cut, a forced stop, and ``--shutdown-delay``'s
default; the settings' validation.

The sequence's tests run on a :class:`JumpingClockLoop`: its delay, grace and margins fall due
at their exact times on the loop's own clock, whatever the machine's load, and a step the test
awaits cannot be overtaken by a timer while the test runs."""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import AsyncGenerator, Callable
from typing import Any

import pytest
from e2e_helpers import PATIENCE
from helpers import JumpingClockLoop, wait_until

from podium.config import ModelConfig, ServerConfig
from podium.dataplane import DataPlane
from podium.errors import ShuttingDown
from podium.runtime.registry import ModelVersion, Registry
from podium.server import _shutdown
from podium.server._limits import ConnectionGuard, ConnectionLimits
from podium.server._listener import Uvicorn, bind
from podium.server._shutdown import FORCE_LIMIT, KUBERNETES_DELAY, Shutdown, delay_for
from podium.types import Call, Capabilities, ModelState, WireProtocol

pytestmark = pytest.mark.anyio

on_a_jumping_clock = pytest.mark.parametrize(
    "anyio_backend", [pytest.param(("asyncio", {"loop_factory": JumpingClockLoop}), id="jumping")]
)


class Instance:
    capabilities = Capabilities(needs_inputs=False)


class Held:
    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.started = 0

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    def statistics(self) -> dict[str, int]:
        return {}

    async def infer(self, inputs: Any, request: Any) -> Any:
        self.started += 1
        await self.release.wait()
        return "answer"

    async def stream(self, inputs: Any, request: Any) -> AsyncGenerator[Any, None]:
        yield await self.infer(inputs, request)


class Listener:
    """Records what the shutdown asked of it, and when (seconds on the loop's clock since
    ``clock``)."""

    def __init__(self, log: list[tuple[str, Any, float]], clock: float) -> None:
        self.log = log
        self.clock = clock
        self.stopped = asyncio.Event()

    def _note(self, what: str, value: Any = None) -> None:
        now = asyncio.get_running_loop().time()
        self.log.append((what, value, round(now - self.clock, 3)))

    def not_serving(self) -> None:
        self._note("not_serving")

    async def stop(self, grace: float | None = None) -> None:
        self._note("stop", grace)
        try:
            async with asyncio.timeout(grace):
                await self.stopped.wait()
        except TimeoutError:
            self._note("grace over")

    async def abort(self) -> None:
        self._note("abort")
        self.stopped.set()


def served(held: Held) -> DataPlane:
    registry = Registry()
    mv = ModelVersion(ModelConfig(name="m"), Instance(), held)  # type: ignore[arg-type]
    mv.state = ModelState.READY
    registry.add(mv)
    return DataPlane(registry)


async def until(condition: Callable[[], object]) -> None:
    await wait_until(condition, PATIENCE, every=0.005)


class Watchdog:
    """``threading.Timer`` as a forced stop arms it, never started: what it would run, when."""

    armed: list[Watchdog] = []

    def __init__(self, interval: float, function: Any, args: Any = (), kwargs: Any = None) -> None:
        self.interval, self.function, self.args = interval, function, args
        self.daemon = False
        self.started = False
        Watchdog.armed.append(self)

    def start(self) -> None:
        self.started = True


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> list[Watchdog]:
    """A short CUT_MARGIN, and a watchdog that never fires (the real one is a thread on the
    real clock, which a loaded machine could let run out during a test): the ones armed."""
    monkeypatch.setattr(_shutdown, "CUT_MARGIN", 0.2)
    monkeypatch.setattr(_shutdown, "threading", type("threading", (), {"Timer": Watchdog}))
    Watchdog.armed = []
    return Watchdog.armed


def test_the_default_delay_is_kubernetes_only() -> None:
    assert delay_for(None, {}) == 0.0
    assert delay_for(None, {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}) == KUBERNETES_DELAY == 5.0
    assert delay_for(0.0, {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}) == 0.0
    assert delay_for(2.5, {}) == 2.5


def test_the_settings_are_seconds_at_least_zero() -> None:
    assert (
        ServerConfig().shutdown.graceful_timeout == 30.0
        and ServerConfig().shutdown.shutdown_delay is None
    )
    assert ServerConfig(graceful_timeout=0, shutdown_delay=3).shutdown.shutdown_delay == 3.0
    for bad in (-1, "soon", True):
        with pytest.raises(ValueError, match="graceful-timeout must be a number of seconds"):
            ServerConfig(graceful_timeout=bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="shutdown-delay must be a number of seconds"):
            ServerConfig(shutdown_delay=bad)  # type: ignore[arg-type]


@on_a_jumping_clock
async def test_not_ready_then_delay_then_drain_then_cut(caplog: pytest.LogCaptureFixture) -> None:
    loop = asyncio.get_running_loop()
    held = Held()
    dp = served(held)
    log: list[Any] = []
    listener = Listener(log, loop.time())
    closed: list[str] = []

    async def close() -> None:
        closed.append("models")

    shutdown = Shutdown(
        dp, [listener], delay=0.2, graceful=0.3, close=close, kill_workers=lambda: 0
    )
    finishing = asyncio.ensure_future(dp.infer(Call("m", None, WireProtocol.TRUSS)))
    outliving = asyncio.ensure_future(dp.infer(Call("m", None, WireProtocol.TRUSS)))
    await until(lambda: held.started == 2)
    caplog.set_level(logging.INFO, "podium")
    listener.clock = began = loop.time()
    stopping = asyncio.ensure_future(shutdown.run(signal.SIGTERM))
    await until(lambda: log)
    assert not dp.ready() and log == [("not_serving", None, 0.0)]  # at once
    await until(lambda: any(entry[0] == "stop" for entry in log))
    # One call ends within the grace: drained. The task is the data plane's task, so end it.
    finishing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await finishing
    with pytest.raises(ShuttingDown, match="did not finish within --graceful-timeout 0.3 s"):
        await outliving
    assert round(loop.time() - began, 3) == 0.2 + 0.3  # cut when the grace ran out
    assert await stopping == 0
    assert closed == ["models"]
    # stopped after the delay, with the grace and CUT_MARGIN; closed by its own grace
    assert log == [("not_serving", None, 0.0), ("stop", 0.3 + 0.2, 0.2), ("grace over", None, 0.7)]
    text = caplog.text
    assert "shutting down on SIGTERM: not ready from now on; 2 (truss model 'm': 2)" in text
    assert "still taking new connections for 0.2 s (--shutdown-delay)" in text
    assert "cutting 1 (truss model 'm': 1) call(s) still running" in text
    assert "1 (truss model 'm': 1) call(s) finished while draining, 1 (truss model 'm': 1) cut" in (
        text
    )


@on_a_jumping_clock
async def test_a_second_signal_cuts_aborts_kills_and_exits_non_zero(quick: list[Watchdog]) -> None:
    """With an hour's delay and grace, a second signal stops at once: on the loop's clock it
    takes less than FORCE_LIMIT (the longest wait a forced stop bounds itself by), and the
    watchdog that would end the process after FORCE_LIMIT is armed with the exit code."""
    loop = asyncio.get_running_loop()
    held = Held()
    dp = served(held)
    log: list[Any] = []
    listener = Listener(log, loop.time())
    killed: list[int] = []

    async def close() -> None:
        pass

    def kill() -> int:
        killed.append(1)
        return 1

    shutdown = Shutdown(dp, [listener], delay=3600, graceful=3600, close=close, kill_workers=kill)
    call = asyncio.ensure_future(dp.infer(Call("m", None, WireProtocol.OIP_GRPC)))
    await until(lambda: held.started)
    stopping = asyncio.ensure_future(shutdown.run(signal.SIGTERM))
    await until(lambda: log)
    forced = loop.time()
    shutdown.force(signal.SIGINT)
    assert await stopping == 128 + signal.SIGINT == shutdown.exit_code
    assert loop.time() - forced < FORCE_LIMIT
    with pytest.raises(ShuttingDown, match="a second stop signal"):
        await call
    assert "abort" in [entry[0] for entry in log] and killed == [1]
    (watchdog,) = quick
    assert watchdog.started and watchdog.interval == FORCE_LIMIT
    assert watchdog.function is _shutdown.exit_now and watchdog.args[0] == 130


async def test_the_http_listener_refuses_new_connections_and_closes_what_outlives_the_grace() -> (
    None
):
    async def echo(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})

    guard = ConnectionGuard("http-test", ConnectionLimits())
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    server = Uvicorn(echo, sock, graceful=30, guard=guard)
    await server.start()
    try:
        # An upload that stalls: it would hold a graceful stop for --body-timeout and more.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789")
        await writer.drain()
        await until(lambda: server.server.server_state.tasks)
        started = time.monotonic()
        stopping = asyncio.ensure_future(server.stop(0.3))
        await until(lambda: not any(s.is_serving() for s in server.server.servers))
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection("127.0.0.1", port)
        async with asyncio.timeout(PATIENCE):  # a safety net: the grace is 0.3 s
            assert await reader.read() == b""  # closed, not answered
            await stopping
        assert time.monotonic() - started >= 0.3  # not before the grace
        assert server.closed_connections == 1
        writer.close()
    finally:
        await server.abort()
        await server.stop(0)
