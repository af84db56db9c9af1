"""Bounded gRPC listeners, attacked the way a client opening thousands of streams, pinging
without end or holding connections would (loopback only, bounded in count and time).

Most tests run a real ``GrpcServer`` in a process of its own (``grpc_limits_server.py``), so
that its threads and memory are measured apart from the clients', in each mode it serves: calls
relayed through grpc's polling thread (the default) and ``grpc.aio`` (the fallback where
grpcio's internals differ, and ``--grpc-aio``). Some speak HTTP/2 frames
directly, to see exactly what the server sends (its SETTINGS, a GOAWAY and its reason). The last
ones check that ``podium serve`` gives both its gRPC listeners these limits and takes the flags.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import struct
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import pytest
from conftest import ROOT, run_server
from e2e_helpers import SERVE_MODELS
from helpers import wait_until

from podium.server.grpc._tensors import ModelInferRequest, ModelInferResponse

pytestmark = pytest.mark.anyio

SERVER = Path(__file__).resolve().parent / "grpc_limits_server.py"
NAME = "podium.test.Limits"
#: How long a test waits for what the server should do: a safety net that turns a hang into a
#: failure, never a timing (limits are judged by what happened; below grpc's keepalive ping, 60 s,
#: and the idle limit, 300 s, which would close a connection of their own accord).
PATIENCE = 30.0
MODES = ["relayed", "aio"]


# -- the server under test ----------------------------------------------------------------------


@contextlib.contextmanager
def limits_server(mode: str, **limits: Any) -> Iterator[SimpleNamespace]:
    """``grpc_limits_server.py`` serving in ``mode`` with ``GrpcLimits(**limits)``; stopped on
    exit."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), *sys.path])}
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), mode, json.dumps(limits)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        served = ""
        for line in proc.stdout:
            if line.startswith("mode "):
                served = line.split()[1]
            if line.startswith("ready "):
                address = line.split()[1]
                break
        else:
            raise RuntimeError(f"the test server exited with {proc.wait()}")
        # A grpcio whose internals differ would serve "relayed" with grpc.aio: not this test.
        assert served == ("" if mode == "aio" else mode)
        yield SimpleNamespace(address=address, pid=proc.pid, mode=mode)
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        if proc.stdout is not None:
            proc.stdout.close()


def proc_status(pid: int) -> dict[str, int]:
    """``Threads`` and ``VmRSS`` (KiB) of process ``pid`` (Linux)."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("Threads", "VmRSS"):
            found[key] = int(value.split()[0])
    return found


def channel(address: str, **options: Any) -> grpc.aio.Channel:
    """A channel with a connection of its own (grpc shares one between channels to the same
    address unless told not to)."""
    opts = [("grpc.use_local_subchannel_pool", 1), *options.items()]
    return grpc.aio.insecure_channel(address, options=opts)


def unary(ch: grpc.aio.Channel, method: str) -> Any:
    return ch.unary_unary(
        f"/{NAME}/{method}",
        request_serializer=ModelInferRequest.SerializeToString,
        response_deserializer=ModelInferResponse.FromString,
    )


def hold(ch: grpc.aio.Channel, timeout: float | None = None) -> Any:
    return ch.unary_stream(
        f"/{NAME}/Hold",
        request_serializer=ModelInferRequest.SerializeToString,
        response_deserializer=ModelInferResponse.FromString,
    )(ModelInferRequest(), timeout=timeout)


async def peer(ch: grpc.aio.Channel) -> str:
    """The client's address as the server sees it: another one is another connection."""
    return (await unary(ch, "Peer")(ModelInferRequest(), timeout=10)).model_name


# -- HTTP/2 frames, for what the server sends exactly -------------------------------------------

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SETTINGS, PING, GOAWAY = 0x4, 0x6, 0x7
MAX_CONCURRENT_STREAMS = 0x3
ENHANCE_YOUR_CALM = 0xB


def frame(kind: int, payload: bytes = b"", flags: int = 0) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + bytes(4) + payload


class RawH2:
    """One HTTP/2 connection spoken frame by frame: the client's preface and SETTINGS sent."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, greet: bool
    ) -> None:
        self.reader, self.writer = reader, writer
        self.closed = False
        #: whether it speaks: one that never greets sends nothing at all, not even an answer
        self.greet = greet
        #: (type, flags) of every frame the server sent, in order
        self.frames: list[tuple[int, int]] = []

    @classmethod
    @contextlib.asynccontextmanager
    async def open(cls, address: str, *, greet: bool = True) -> AsyncIterator[RawH2]:
        host, _, port = address.rpartition(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        raw = cls(reader, writer, greet)
        if greet:
            writer.write(PREFACE + frame(SETTINGS))
        try:
            yield raw
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    def send(self, data: bytes) -> None:
        if not self.writer.is_closing():
            self.writer.write(data)

    async def next_frame(self, within: float) -> tuple[int, int, bytes] | None:
        """The next frame (type, flags, payload), its SETTINGS acknowledged as a client must
        (unless it never greets); None when the connection closed, TimeoutError when nothing
        came ``within`` seconds."""
        try:
            head = await asyncio.wait_for(self.reader.readexactly(9), within)
            payload = await self.reader.readexactly(int.from_bytes(head[:3], "big"))
        except (asyncio.IncompleteReadError, ConnectionError):
            self.closed = True
            return None
        self.frames.append((head[3], head[4]))
        if head[3] == SETTINGS and not head[4] & 1 and self.greet:
            self.send(frame(SETTINGS, flags=1))
        return head[3], head[4], payload

    async def settings(self) -> dict[int, int]:
        """The server's first SETTINGS."""
        while True:
            got = await self.next_frame(10)
            assert got is not None, "closed before SETTINGS"
            kind, flags, payload = got
            if kind == SETTINGS and not flags & 1:
                pairs = [
                    struct.unpack(">HI", payload[i : i + 6]) for i in range(0, len(payload), 6)
                ]
                return dict(pairs)

    async def goaway(self, within: float) -> tuple[int, bytes] | None:
        """(error code, debug data) of the GOAWAY that comes within ``within`` s, skipping
        other frames; None if the connection closed without one."""
        deadline = time.monotonic() + within
        while (left := deadline - time.monotonic()) > 0:
            got = await self.next_frame(left)
            if got is None:
                return None
            kind, _, payload = got
            if kind == GOAWAY:
                return int.from_bytes(payload[4:8], "big"), payload[8:]
        raise TimeoutError(f"no GOAWAY within {within} s")

    async def closes(self, within: float) -> bool:
        """Whether the server closes the connection within ``within`` s (frames skipped)."""
        deadline = time.monotonic() + within
        with contextlib.suppress(TimeoutError):
            while (left := deadline - time.monotonic()) > 0 and not self.closed:
                await self.next_frame(left)
        return self.closed


# -- fixtures -----------------------------------------------------------------------------------

#: Small limits, so that the tests are quick; pings at the default policy.
TIGHT = {"max_concurrent_streams": 20}


@pytest.fixture(scope="module", params=MODES)
def tight(request: pytest.FixtureRequest) -> Iterator[SimpleNamespace]:
    with limits_server(request.param, **TIGHT) as server:
        yield server


# -- streams ------------------------------------------------------------------------------------


async def test_the_server_announces_its_stream_limit(tight: SimpleNamespace) -> None:
    async with RawH2.open(tight.address) as raw:
        settings = await raw.settings()
    assert settings[MAX_CONCURRENT_STREAMS] == TIGHT["max_concurrent_streams"]


async def test_a_burst_of_calls_on_one_connection_waits_for_streams(
    tight: SimpleNamespace,
) -> None:
    """300 calls at once on one connection: 20 at a time reach the server, the others wait on
    the client until a stream is free, and every call succeeds (none is refused)."""
    async with channel(tight.address) as ch:
        call = unary(ch, "Sleep")
        replies = await asyncio.gather(
            *(call(ModelInferRequest(id="0.01"), timeout=60) for _ in range(300))
        )
    assert len(replies) == 300


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("mode", MODES)
async def test_thousands_of_streams_hold_neither_threads_nor_memory(mode: str) -> None:
    """2,000 streams on 4 connections, each held open by the server: at most
    max_concurrent_streams per connection reach it, each held without a thread, its threads
    and memory stay bounded, and a normal unary call succeeds during the flood and after it."""
    per_connection, connections, streams = 50, 4, 2000
    with limits_server(mode, max_concurrent_streams=per_connection) as server:
        async with channel(server.address) as other:
            await peer(other)
            await asyncio.sleep(0.5)  # the server settles after its first call
            before = proc_status(server.pid)
            channels = [channel(server.address) for _ in range(connections)]
            refused: list[grpc.StatusCode] = []

            async def one(ch: grpc.aio.Channel) -> list[str]:
                try:
                    return [item.id async for item in hold(ch)]
                except grpc.aio.AioRpcError as exc:
                    refused.append(exc.code())
                    return []

            flood = [asyncio.create_task(one(channels[i % connections])) for i in range(streams)]
            admitted = per_connection * connections
            # Wait until the server holds as many streams as it admits, then a moment more.
            held = 0
            deadline = time.monotonic() + 60
            while held < admitted:
                assert time.monotonic() < deadline, f"held {held}, refused {len(refused)}"
                await asyncio.sleep(0.2)
                held = int((await unary(other, "Held")(ModelInferRequest(), timeout=10)).id)
            await asyncio.sleep(1.0)
            during = proc_status(server.pid)
            held = int((await unary(other, "Held")(ModelInferRequest(), timeout=10)).id)
            # A normal call, during the flood: answered while every admitted stream is still
            # held (they end only at Release, after it), so nothing waits behind them; how
            # fast it is answered depends on the machine's load, so that is not asserted.
            await peer(other)
            await unary(other, "Release")(ModelInferRequest(), timeout=10)
            results = await asyncio.gather(*flood)
            await peer(other)  # and after it
            for ch in channels:
                await ch.close()
    assert held == admitted  # no more than the limits let in
    # the others wait on the client (HTTP/2), then all complete
    assert refused == []
    assert results == [["0", "1"]] * streams
    assert during["Threads"] <= before["Threads"] + 2  # no thread per stream
    # 200 held streams cost a few MB (2,000 admitted at once, as before the limit: ~50 MB).
    assert during["VmRSS"] - before["VmRSS"] < 32 * 1024


# -- pings --------------------------------------------------------------------------------------


async def test_a_client_pinging_too_often_gets_goaway_too_many_pings(
    tight: SimpleNamespace,
) -> None:
    async with RawH2.open(tight.address) as raw:
        # At once: a ping written after the server closed would reset the connection, and the
        # GOAWAY unread with it.
        raw.send(b"".join(frame(PING, i.to_bytes(8, "big")) for i in range(10)))
        assert await raw.goaway(PATIENCE) == (ENHANCE_YOUR_CALM, b"too_many_pings")
        assert await raw.closes(PATIENCE)
    async with channel(tight.address) as ch:
        await peer(ch)  # everyone else is served


@pytest.mark.slow
async def test_a_grpc_channel_with_aggressive_keepalive_is_disconnected() -> None:
    """A grpc channel asked to ping every 50 ms (grpc sends one a second at most) loses its
    connection and its call in flight at its third early ping; a channel pinging no more often
    than allowed keeps both. The cut call would run for a minute otherwise: it ends only by the
    cut (or, failing the test, by its deadline), whatever the machine's speed."""
    aggressive = {
        "grpc.keepalive_time_ms": 50,
        "grpc.keepalive_permit_without_calls": 1,
        "grpc.http2.max_pings_without_data": 0,
    }
    polite = {**aggressive, "grpc.keepalive_time_ms": 2000}
    with limits_server("relayed", min_ping_interval=1.5) as server:
        async with (
            channel(server.address, **aggressive) as bad,
            channel(server.address, **polite) as good,
        ):
            cut, kept = await asyncio.gather(
                unary(bad, "Sleep")(ModelInferRequest(id="60"), timeout=PATIENCE),
                unary(good, "Sleep")(ModelInferRequest(id="6"), timeout=PATIENCE),
                return_exceptions=True,
            )
    assert isinstance(cut, grpc.aio.AioRpcError), cut
    assert cut.code() == grpc.StatusCode.UNAVAILABLE
    assert "too many pings" in (cut.details() or "").lower()
    assert isinstance(kept, ModelInferResponse), kept


async def test_pings_at_the_allowed_rate_keep_the_connection() -> None:
    """Pings three times as far apart as the limit asks: each one is answered, no GOAWAY comes
    before the last answer, nor in a moment after it."""
    count = 6
    with limits_server("relayed", min_ping_interval=0.2) as server:
        async with RawH2.open(server.address) as raw:
            for i in range(count):
                raw.send(frame(PING, i.to_bytes(8, "big")))
                await asyncio.sleep(0.6)  # at least: a sleep never ends early
            answered = 0
            while answered < count:  # in order: a GOAWAY for one ping precedes later answers
                got = await raw.next_frame(PATIENCE)
                assert got is not None and got[0] != GOAWAY, raw.frames
                answered += got[:2] == (PING, 1)
            with pytest.raises(TimeoutError):
                await raw.goaway(0.5)
            assert not raw.closed


# -- the life of a connection -------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_an_old_connection_is_told_to_go_and_its_call_finishes(mode: str) -> None:
    """At max_connection_age (1 s, ±10 %), not before, the server sends GOAWAY: a call in flight
    on the old connection goes on, and finishes when the test lets it (the grace, PATIENCE, only
    bounds a hang), while new calls go over a new connection."""
    with limits_server(mode, max_connection_age=1.0, max_connection_age_grace=PATIENCE) as server:
        opened = time.monotonic()
        async with RawH2.open(server.address) as raw:
            # NO_ERROR; the reason reads "max_age" since grpcio 1.7x, nothing before
            assert (await raw.goaway(PATIENCE) or (-1,))[0] == 0
        assert time.monotonic() - opened >= 0.8  # the age less grpc's jitter, and a margin
        async with channel(server.address) as ch:
            held = hold(ch, timeout=PATIENCE)
            first = (await held.read()).model_name  # in flight on the connection that ages

            async def moved() -> bool:
                return await peer(ch) != first

            await wait_until(moved, PATIENCE, every=0.05, what="a new connection after GOAWAY")
            await unary(ch, "Release")(ModelInferRequest(), timeout=PATIENCE)
            assert (await held.read()).id == "1"  # the old connection's call goes on
            assert await held.read() is grpc.aio.EOF
            assert await held.code() == grpc.StatusCode.OK


async def test_the_grace_bounds_a_call_in_flight() -> None:
    """A call still in flight max_connection_age_grace (0.5 s) after the GOAWAY (age 0.5 s) is
    ended by the server: a held stream, which nothing else ends before its deadline
    (DEADLINE_EXCEEDED), fails UNAVAILABLE, not before the age and the grace."""
    with limits_server("relayed", max_connection_age=0.5, max_connection_age_grace=0.5) as server:
        async with channel(server.address) as ch:
            started = time.monotonic()
            held = hold(ch, timeout=PATIENCE)
            assert (await held.read()).id == "0"
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await held.read()
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE  # "max connection age" (1.7x)
    assert time.monotonic() - started >= 0.9  # the age (less its jitter) and the grace


async def test_silent_and_idle_connections_are_closed() -> None:
    """A connection that never greets (no HTTP/2 preface, nor any other byte) is closed after
    the handshake timeout, not before, with a GOAWAY that says so (the idle limit would close it
    too, later); one that greets but makes no call, after max_connection_idle, not before, with
    a GOAWAY that says so."""
    with limits_server("relayed", handshake_timeout=0.5, max_connection_idle=1.0) as server:
        started = time.monotonic()
        async with RawH2.open(server.address, greet=False) as silent:
            # "Did not receive HTTP/2 settings before handshake timeout"
            assert b"handshake" in (await silent.goaway(PATIENCE) or (0, b""))[1]
            assert await silent.closes(PATIENCE)
        assert time.monotonic() - started >= 0.45
        opened = time.monotonic()
        async with RawH2.open(server.address) as idle:
            # grpc's reason reads "connection idle" or "enter idle", by version
            assert b"idle" in (await idle.goaway(PATIENCE) or (0, b""))[1]
            assert time.monotonic() - opened >= 0.9
            assert await idle.closes(PATIENCE)
        async with channel(server.address) as ch:
            await peer(ch)


async def test_connections_beyond_the_cap_are_closed_at_once() -> None:
    """One connection more than max_connections is closed before the server says anything on
    it (a connection served gets the server's SETTINGS first)."""
    with limits_server("relayed", max_connections=3) as server:
        async with contextlib.AsyncExitStack() as held:
            for _ in range(3):
                raw = await held.enter_async_context(RawH2.open(server.address))
                await raw.settings()
            async with RawH2.open(server.address) as extra:
                assert await extra.closes(PATIENCE)
                assert extra.frames == []
            async with channel(server.address) as ch:
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await peer(ch)
                assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        # the held ones are gone: served again, once the server has seen them close (it reads
        # their ends on its own threads, so a new connection can come first and be refused)
        await wait_until(lambda: served(server.address), PATIENCE, every=0.05, what="served again")


async def served(address: str) -> bool:
    """Whether a new connection's call is served (False: refused as ``UNAVAILABLE``)."""
    async with channel(address) as ch:
        try:
            await peer(ch)
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.UNAVAILABLE:
                raise
            return False
    return True


async def test_metadata_over_the_limit_ends_the_call() -> None:
    with limits_server("relayed", max_metadata_size=4096) as server:
        async with channel(server.address) as ch:
            await unary(ch, "Peer")(ModelInferRequest(), metadata=(("x-big", "a" * 3000),))
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await unary(ch, "Peer")(ModelInferRequest(), metadata=(("x-big", "a" * 5000),))
            assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            await peer(ch)


# -- podium serve -------------------------------------------------------------------------------


async def test_podium_serve_limits_both_grpc_listeners_by_default() -> None:
    with run_server(SERVE_MODELS) as server:
        for listener in ("grpc-inference", "grpc-management"):
            async with RawH2.open(server.addresses[listener]) as raw:
                assert (await raw.settings())[MAX_CONCURRENT_STREAMS] == 100
            async with RawH2.open(server.addresses[listener]) as raw:
                raw.send(b"".join(frame(PING, i.to_bytes(8, "big")) for i in range(10)))
                assert await raw.goaway(PATIENCE) == (ENHANCE_YOUR_CALM, b"too_many_pings")


async def test_podium_serve_takes_the_grpc_flags() -> None:
    flags = (
        "--grpc-max-concurrent-streams",
        "7",
        "--grpc-max-connection-age",
        "0.5",
        "--grpc-max-connection-age-grace",
        "1",
        "--max-connections",
        "2",
    )
    with run_server(SERVE_MODELS, args=flags) as server:
        for listener in ("grpc-inference", "grpc-management"):
            address = server.addresses[listener]
            async with RawH2.open(address) as one, RawH2.open(address) as two:
                assert (await one.settings())[MAX_CONCURRENT_STREAMS] == 7
                await two.settings()
                async with RawH2.open(address) as third:  # --max-connections 2
                    # closed unspoken to: not served, then told to go at its age
                    assert await third.closes(PATIENCE) and third.frames == []
                assert (await one.goaway(PATIENCE) or (-1,))[0] == 0  # max age
