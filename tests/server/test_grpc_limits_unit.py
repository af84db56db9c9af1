"""The gRPC limits piece by piece: the channel arguments ``GrpcLimits`` gives grpc, their
validation and their flags (and the deprecated ``--grpc-threads``); reflection streams on a real
in-process server hold no thread. ``test_grpc_limits.py`` attacks real servers with them."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import click
import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2

from podium.cli import _merge
from podium.config import ServerConfig
from podium.server.grpc import GrpcLimits, GrpcServer
from podium.server.grpc._limits import channel_options

INT_MAX = 2**31 - 1


def test_the_defaults_are_the_documented_ones() -> None:
    options = dict(channel_options(GrpcLimits()))
    assert options == {
        "grpc.max_allowed_incoming_connections": 1000,
        "grpc.max_concurrent_streams": 100,
        "grpc.http.overload_protection": 0,
        "grpc.server_handshake_timeout_ms": 10_000,
        "grpc.max_connection_idle_ms": 300_000,
        "grpc.max_connection_age_ms": 1_800_000,
        "grpc.max_connection_age_grace_ms": INT_MAX,  # calls in flight are never cut
        "grpc.keepalive_time_ms": 60_000,
        "grpc.keepalive_timeout_ms": 20_000,
        "grpc.keepalive_permit_without_calls": 1,
        "grpc.http2.min_ping_interval_without_data_ms": 5_000,
        "grpc.http2.max_ping_strikes": 2,
        "grpc.max_metadata_size": 16 * 1024,
        "grpc.absolute_max_metadata_size": 16 * 1024,
    }


def test_server_config_defaults_are_grpc_limits_defaults() -> None:
    config, limits = ServerConfig(), GrpcLimits()
    assert config.grpc == limits  # the group is what the listeners get
    assert config.http.header_timeout == limits.handshake_timeout
    faster = ServerConfig(header_timeout=3, max_connections=5, grpc_keepalive_time=0)
    assert (faster.grpc.handshake_timeout, faster.grpc.max_connections) == (3.0, 5)
    assert faster.grpc.keepalive_time == 0.0


def test_zero_means_never_and_times_are_whole_milliseconds() -> None:
    options = dict(
        channel_options(
            GrpcLimits(
                max_connection_idle=0,
                max_connection_age=0,
                keepalive_time=0,
                min_ping_interval=0,
                max_connection_age_grace=0.0015,
                handshake_timeout=1e9,  # longer than grpc can say: unlimited
            )
        )
    )
    assert options["grpc.max_connection_idle_ms"] == INT_MAX
    assert options["grpc.max_connection_age_ms"] == INT_MAX
    assert options["grpc.keepalive_time_ms"] == INT_MAX
    assert options["grpc.http2.min_ping_interval_without_data_ms"] == 0  # any rate
    assert options["grpc.max_connection_age_grace_ms"] == 2
    assert options["grpc.server_handshake_timeout_ms"] == INT_MAX


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_connections", 0),
        ("max_concurrent_streams", True),
        ("max_metadata_size", 2**31),
        ("max_ping_strikes", -1),
        ("handshake_timeout", 0),
        ("keepalive_timeout", 0),
        ("max_connection_age", -1.0),
        ("max_connection_idle", float("nan")),
        ("keepalive_time", float("inf")),
        ("min_ping_interval", "5"),
    ],
)
def test_grpc_limits_refuse_nonsense(field: str, value: Any) -> None:
    with pytest.raises(ValueError, match=field.replace("_", "-")):
        GrpcLimits(**{field: value})


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("grpc_max_concurrent_streams", 0, "grpc-max-concurrent-streams must be an integer 1-"),
        ("grpc_max_connection_age", -1, "grpc-max-connection-age must be a number of seconds"),
        ("grpc_max_connection_age_grace", "1", "grpc-max-connection-age-grace must be a number"),
        ("grpc_keepalive_timeout", 0, "grpc-keepalive-timeout must be a number of seconds"),
        ("grpc_min_ping_interval", float("nan"), "grpc-min-ping-interval must be a number"),
        ("grpc_max_connection_idle", 1e9, "grpc-max-connection-idle must be a number"),
    ],
)
def test_invalid_grpc_limits_name_the_flag(key: str, value: Any, fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        ServerConfig(**{key: value})
    assert fragment in str(info.value)
    assert repr(value) in str(info.value)


def test_grpc_limits_come_from_flags_and_config_files(tmp_path: Path) -> None:
    config = tmp_path / "podium.yaml"
    config.write_text("grpc-max-connection-age-grace: 30\ngrpc_max_concurrent_streams: 10\n")
    merged = _merge(config, {"grpc_keepalive_time": 0, "grpc_max_concurrent_streams": None})
    assert merged.grpc.max_connection_age_grace == 30.0
    assert isinstance(merged.grpc.max_connection_age_grace, float)
    assert (merged.grpc.max_concurrent_streams, merged.grpc.keepalive_time) == (10, 0.0)
    assert _merge(None, {}).grpc.max_connection_age_grace is None
    with pytest.raises(click.UsageError, match="grpc-min-ping-interval"):
        _merge(None, {"grpc_min_ping_interval": -1.0})


# -- --grpc-threads: deprecated ------------------------------------------------------------------


def test_grpc_threads_is_accepted_but_deprecated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _merge(None, {}).protocols.grpc_aio is False
    assert capsys.readouterr().err == ""
    assert _merge(None, {"grpc_threads": 8}).protocols.grpc_aio is False  # no threads to size
    assert "--grpc-threads is deprecated and has no effect" in capsys.readouterr().err
    assert _merge(None, {"grpc_threads": 0}).protocols.grpc_aio is True  # what 0 meant: grpc.aio
    assert _merge(None, {"grpc_threads": 0, "grpc_aio": False}).protocols.grpc_aio is False
    config = tmp_path / "podium.yaml"
    config.write_text("grpc-threads: 0\n")
    assert _merge(config, {}).protocols.grpc_aio is True
    assert f"{config}: grpc_threads is deprecated" in capsys.readouterr().err
    with pytest.raises(click.UsageError, match="grpc-aio must be true or false"):
        _merge(None, {"grpc_aio": "yes"})


# -- on a real server: reflection, relayed like every other service -----------------------------


@contextlib.asynccontextmanager
async def served(mode: str) -> AsyncIterator[grpc.aio.Channel]:
    server = GrpcServer(
        [], host="127.0.0.1", port=0, max_message_size=1 << 20, relay=mode == "relayed"
    )
    address = await server.start()
    assert server.relayed is (mode == "relayed")
    channel = grpc.aio.insecure_channel(address)
    try:
        yield channel
    finally:
        await channel.close()
        await server.stop()


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["relayed", "aio"])
async def test_reflection_streams_hold_no_thread(mode: str) -> None:
    """40 reflection streams stay open at once (no thread each, no budget to refuse them) while
    health answers; each answers every request; all end when their clients close them."""
    info = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
    async with served(mode) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        # Counted once the server has served a call: the threads it starts with (grpc's own, the
        # sender, the idle workers that the relay's start-up check left in the loop's executor,
        # one or two as the scheduler had it) and the client's poller are there already.
        before = threading.active_count()
        stop = asyncio.Event()

        async def requests() -> AsyncIterator[Any]:
            yield reflection_pb2.ServerReflectionRequest(list_services="")
            await stop.wait()
            yield reflection_pb2.ServerReflectionRequest(list_services="")

        streams = [
            channel.stream_stream(
                info,
                request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
                response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
            )(requests())
            for _ in range(40)
        ]
        for stream in streams:
            reply = await asyncio.wait_for(stream.read(), 10)
            names = {s.name for s in reply.list_services_response.service}
            assert "grpc.health.v1.Health" in names
        assert threading.active_count() <= before  # none per stream
        reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        stop.set()
        for stream in streams:
            second = await asyncio.wait_for(stream.read(), 10)
            assert second.HasField("list_services_response")
            assert await asyncio.wait_for(stream.code(), 10) == grpc.StatusCode.OK
