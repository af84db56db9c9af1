"""The gRPC limits piece by piece: the channel arguments ``GrpcLimits`` gives grpc, their
validation and their flags, and the stream budget of thread-pool servers (reflection included,
on a real in-process server). ``test_grpc_limits.py`` attacks real servers with them."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Iterator
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
from podium.server.grpc._limits import StreamBudget, channel_options

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


# -- the stream budget --------------------------------------------------------------------------


class Aborted(Exception):
    pass


class FakeContext:
    def __init__(self) -> None:
        self.aborted: tuple[grpc.StatusCode, str] | None = None

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.aborted = (code, details)
        raise Aborted


def items(request: Any, context: Any) -> Iterator[int]:
    yield from range(3)


def test_a_budget_lets_streams_in_up_to_its_limit_and_frees_their_places() -> None:
    budget = StreamBudget(2)
    serve = budget.limited(items)
    first, second = serve(None, FakeContext()), serve(None, FakeContext())
    assert (next(first), next(second)) == (0, 0)
    refused = FakeContext()
    with pytest.raises(Aborted):
        next(serve(None, refused))
    assert refused.aborted is not None
    assert refused.aborted[0] == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "2 streams already hold threads" in refused.aborted[1]
    assert list(first) == [1, 2]  # ended: its place is free
    second.close()  # the client left mid-stream: its place is free too
    for _ in range(2):
        assert list(serve(None, FakeContext())) == [0, 1, 2]


def test_a_budget_leaves_unary_methods_alone_and_wraps_streaming_ones() -> None:
    budget = StreamBudget(1)
    unary = grpc.unary_unary_rpc_method_handler(lambda request, context: request)
    assert budget.handler(unary) is unary
    for make in (grpc.unary_stream_rpc_method_handler, grpc.stream_stream_rpc_method_handler):
        wrapped = budget.handler(make(items, request_deserializer=bytes, response_serializer=str))
        assert wrapped.response_streaming
        assert (wrapped.request_deserializer, wrapped.response_serializer) == (bytes, str)
    with pytest.raises(ValueError, match="at least 1"):
        StreamBudget(0)


# -- on a real server: reflection streams count too ---------------------------------------------


@contextlib.asynccontextmanager
async def served(mode: str) -> AsyncIterator[grpc.aio.Channel]:
    server = GrpcServer(
        [], host="127.0.0.1", port=0, max_message_size=1 << 20, threads=4, relay=mode == "relayed"
    )
    address = await server.start()
    channel = grpc.aio.insecure_channel(address)
    try:
        yield channel
    finally:
        await channel.close()
        await server.stop()


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["relayed", "blocking"])
async def test_reflection_streams_hold_at_most_half_the_threads(mode: str) -> None:
    info = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
    async with served(mode) as channel:
        open_streams = []
        stop = asyncio.Event()

        async def requests() -> AsyncIterator[Any]:
            yield reflection_pb2.ServerReflectionRequest(list_services="")
            await stop.wait()

        async def quiet() -> AsyncIterator[Any]:
            # Nothing sent: a request on its way while the server ends the call makes grpc.aio
            # report INTERNAL ("Failed execute_batch") instead of the server's status.
            await stop.wait()
            yield reflection_pb2.ServerReflectionRequest(list_services="")

        for making in (requests, requests, quiet):  # one after another: in its place or refused
            stream = channel.stream_stream(
                info,
                request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
                response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
            )(making())
            open_streams.append(stream)
            with contextlib.suppress(grpc.aio.AioRpcError):
                await stream.read()
        codes = [await stream.code() if stream.done() else None for stream in open_streams]
        assert codes == [None, None, grpc.StatusCode.RESOURCE_EXHAUSTED]
        first, second, _ = open_streams
        # Unary calls still find threads (health is bridged: relayed, or blocking in the pool).
        health = health_pb2_grpc.HealthStub(channel)
        reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        stop.set()
        first.cancel()
        second.cancel()
        # Their places are free again, once their threads saw the client leave.
        for attempt in range(50):
            again = channel.stream_stream(
                info,
                request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
                response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
            )(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
            try:
                replies = [reply async for reply in again]
            except grpc.aio.AioRpcError as exc:  # refused (INTERNAL: see quiet() above)
                assert exc.code() in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.INTERNAL)
                assert attempt < 49, "the places were never given back"
                await asyncio.sleep(0.1)
                continue
            assert replies[0].HasField("list_services_response")
            break


def test_the_budget_is_thread_safe() -> None:
    budget = StreamBudget(5)
    serve = budget.limited(items)
    refused = []

    def worker() -> None:
        for _ in range(200):
            context = FakeContext()
            try:
                list(serve(None, context))
            except Aborted:
                refused.append(context.aborted)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Every place was given back: five streams can be open at once afterwards.
    opened = [serve(None, FakeContext()) for _ in range(5)]
    assert [next(g) for g in opened] == [0] * 5
