"""Calls on the gRPC server in both its modes: relayed through grpcio's internals (the default)
and ``grpc.aio`` (``relay=False``, also the fallback when the internals differ): a real
``GrpcServer`` in this process, a real channel, and coroutine handlers on this loop.

Both modes must look the same to a client: answers, aborts with their codes, metadata both ways,
a handler that raises, deadlines that cancel the handler, a graceful stop that lets a call finish,
streams both ways. The relay adds precise errors for a request that does not parse and for a
unary call sent without its request, and bounds what waits between grpc and the loop on a stream
by its window. Streams hold no thread: 40 run at once.

Every server here asserts the mode it serves with, so a grpcio on which the relay falls back
fails these tests instead of passing them on grpc.aio (``dev.py test-grpc-range`` runs them at
both ends of the grpcio pin). The choice itself: the internals check, the self-test and the
fallback when either fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from typing import Any

import grpc
import pytest

from podium.errors import NotFound
from podium.server.grpc import bridge
from podium.server.grpc._errors import unhandled_status
from podium.server.grpc._server import GrpcServer, Service
from podium.server.grpc._tensors import ModelInferRequest, ModelInferResponse
from podium.server.grpc.bridge import InternalsDiffer, Mode

pytestmark = pytest.mark.anyio

NAME = "podium.test.Relay"


class Handlers:
    """Coroutine handlers (``grpc.aio`` style) that record what they saw."""

    def __init__(self) -> None:
        self.threads: set[int] = set()
        self.cancelled = asyncio.Event()
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def echo(self, request: Any, context: Any) -> Any:
        self.threads.add(threading.get_ident())
        await asyncio.sleep(0)  # a real suspension on the loop
        return ModelInferResponse(model_name=request.model_name, id=request.id)

    async def abort(self, request: Any, context: Any) -> Any:
        await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"no {request.model_name}")

    async def raises(self, request: Any, context: Any) -> Any:
        raise RuntimeError("a bug in a handler")

    async def metadata(self, request: Any, context: Any) -> Any:
        sent = dict(context.invocation_metadata())
        await context.send_initial_metadata((("x-initial", sent.get("x-ask", "")),))
        context.set_trailing_metadata((("x-trailing", "bye"),))
        return ModelInferResponse(model_name=request.model_name)

    async def hang(self, request: Any, context: Any) -> Any:
        self.started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return ModelInferResponse()

    async def unserializable(self, request: Any, context: Any) -> Any:
        return "not a ModelInferResponse"

    async def not_found(self, request: Any, context: Any) -> Any:
        raise NotFound(f"model '{request.model_name}' is not known")

    async def slow(self, request: Any, context: Any) -> Any:
        self.started.set()
        await self.release.wait()
        return ModelInferResponse(model_name="finished")


def service(handlers: Handlers) -> Service:
    def unary(behavior: Any) -> grpc.RpcMethodHandler:
        return grpc.unary_unary_rpc_method_handler(
            behavior,
            request_deserializer=ModelInferRequest.FromString,
            response_serializer=ModelInferResponse.SerializeToString,
        )

    methods = ("echo", "abort", "raises", "metadata", "hang", "slow", "unserializable", "not_found")
    return Service(NAME, {m.title().replace("_", ""): unary(getattr(handlers, m)) for m in methods})


@contextlib.asynccontextmanager
async def running(
    service: Service, mode: str, handlers: Any, grace: float, max_message_size: int = 1 << 20
) -> AsyncIterator[SimpleNamespace]:
    """``service`` on an in-process server, relayed or on ``grpc.aio``, and a channel."""
    server = GrpcServer(
        [service],
        host="127.0.0.1",
        port=0,
        max_message_size=max_message_size,
        grace=grace,
        relay=mode == "relayed",
    )
    address = await server.start()
    assert server.relayed is (mode == "relayed")
    if mode == "relayed":
        assert server.decision is not None and server.decision.mode is Mode.RELAYED
        assert server._bridge is not None and server._bridge._sender is not None
    channel = grpc.aio.insecure_channel(address)
    try:
        yield SimpleNamespace(server=server, handlers=handlers, channel=channel, mode=mode)
    finally:
        await channel.close()
        await server.stop()


@pytest.fixture(params=["relayed", "aio"])
async def served(request: pytest.FixtureRequest) -> AsyncIterator[SimpleNamespace]:
    handlers = Handlers()
    async with running(service(handlers), request.param, handlers, grace=5.0) as it:
        yield it


def rpc(channel: grpc.aio.Channel, method: str) -> Any:
    return channel.unary_unary(
        f"/{NAME}/{method}",
        request_serializer=ModelInferRequest.SerializeToString,
        response_deserializer=ModelInferResponse.FromString,
    )


async def test_the_relay_is_on_by_default_with_this_grpcio() -> None:
    assert isinstance(bridge.load(), bridge.Internals)
    checked = await bridge.check(unhandled_status)
    assert (checked.mode, checked.reason) == (Mode.RELAYED, "")
    assert (await bridge.decide(unhandled_status)).mode is Mode.RELAYED


async def test_an_answer_comes_back_from_a_handler_on_the_loop(served: Any) -> None:
    reply = await rpc(served.channel, "Echo")(ModelInferRequest(model_name="m", id="7"))
    assert (reply.model_name, reply.id) == ("m", "7")
    assert served.handlers.threads == {threading.get_ident()}


async def test_many_calls_at_once_each_get_their_own_answer(served: Any) -> None:
    call = rpc(served.channel, "Echo")
    replies = await asyncio.gather(
        *(call(ModelInferRequest(model_name="m", id=str(i))) for i in range(300))
    )
    assert [r.id for r in replies] == [str(i) for i in range(300)]


async def test_an_abort_keeps_its_code_and_details(served: Any) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await rpc(served.channel, "Abort")(ModelInferRequest(model_name="thing"))
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert caught.value.details() == "no thing"
    await rpc(served.channel, "Echo")(ModelInferRequest(model_name="m"))  # still serving


async def test_a_handler_that_raises_is_unknown_with_its_message(served: Any) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await rpc(served.channel, "Raises")(ModelInferRequest())
    assert caught.value.code() == grpc.StatusCode.UNKNOWN
    assert "a bug in a handler" in (caught.value.details() or "")


async def test_metadata_reaches_the_handler_and_comes_back(served: Any) -> None:
    call = rpc(served.channel, "Metadata")(
        ModelInferRequest(model_name="m"), metadata=(("x-ask", "hello"),)
    )
    assert (await call).model_name == "m"
    assert ("x-initial", "hello") in list(await call.initial_metadata())
    assert ("x-trailing", "bye") in list(await call.trailing_metadata())


async def test_a_deadline_cancels_the_handler(served: Any) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await rpc(served.channel, "Hang")(ModelInferRequest(), timeout=0.5)
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    await asyncio.wait_for(served.handlers.cancelled.wait(), 5)


async def test_a_client_that_cancels_cancels_the_handler(served: Any) -> None:
    call = rpc(served.channel, "Hang")(ModelInferRequest())
    await asyncio.wait_for(served.handlers.started.wait(), 5)
    call.cancel()
    await asyncio.wait_for(served.handlers.cancelled.wait(), 5)
    await rpc(served.channel, "Echo")(ModelInferRequest(model_name="m"))


async def test_a_graceful_stop_lets_a_call_in_flight_finish(served: Any) -> None:
    call = asyncio.ensure_future(rpc(served.channel, "Slow")(ModelInferRequest()))
    await asyncio.wait_for(served.handlers.started.wait(), 5)
    stopping = asyncio.ensure_future(served.server.stop())
    await asyncio.sleep(0.2)
    assert not call.done()
    served.handlers.release.set()
    assert (await asyncio.wait_for(call, 5)).model_name == "finished"
    await asyncio.wait_for(stopping, 10)


async def test_a_request_that_does_not_parse_is_invalid(served: Any) -> None:
    garbage = served.channel.unary_unary(f"/{NAME}/Echo")  # bytes in, bytes out
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await garbage(b"\xff\xff\xff\xff")
    if served.mode == "relayed":
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "does not parse" in (caught.value.details() or "")
    else:  # grpc.aio's own answer
        assert caught.value.code() == grpc.StatusCode.UNKNOWN
        assert "DecodeError" in (caught.value.details() or "")
    await rpc(served.channel, "Echo")(ModelInferRequest(model_name="m"))


async def test_a_unary_call_without_its_request_is_unimplemented(served: Any) -> None:
    if served.mode != "relayed":
        pytest.skip("grpc.aio waits for the request until the deadline; the relay answers")
    empty = served.channel.stream_unary(f"/{NAME}/Echo")

    async def nothing() -> AsyncIterator[bytes]:
        return
        yield b""

    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await empty(nothing())
    assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert "requires exactly one request message" in (caught.value.details() or "")


async def test_the_sender_thread_ends_with_the_server() -> None:
    before = {t.name for t in threading.enumerate()}
    server = GrpcServer([service(Handlers())], host="127.0.0.1", port=0, max_message_size=1 << 20)
    await server.start()
    assert "podium-grpc-send" in {t.name for t in threading.enumerate()} - before
    await server.stop()
    assert "podium-grpc-send" not in {t.name for t in threading.enumerate()} - before


async def test_a_relayed_unary_call_is_served_below_grpcs_per_call_state(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The relay's own loop serves a unary call and a stream: grpc makes no per-call state for
    either, and the loop remembers the methods it served, never a client's unknown method names
    (grpc answers those, as without the relay)."""
    import grpc._server as real

    made = 0

    class Counted(real._RPCState):  # type: ignore[name-defined,misc]
        def __init__(self) -> None:
            nonlocal made
            made += 1
            super().__init__()

    monkeypatch.setattr(real, "_RPCState", Counted)
    handlers = StreamHandlers()
    methods = {
        "Echo": grpc.unary_unary_rpc_method_handler(
            Handlers().echo,
            request_deserializer=ModelInferRequest.FromString,
            response_serializer=ModelInferResponse.SerializeToString,
        ),
        "ThreeThenAbort": grpc.unary_stream_rpc_method_handler(
            handlers.three_then_abort,
            request_deserializer=ModelInferRequest.FromString,
            response_serializer=ModelInferResponse.SerializeToString,
        ),
    }
    async with running(Service(NAME, methods), "relayed", handlers, grace=1) as it:
        made = 0  # (the start-up check's own calls, when this test is the process's first)
        for i in range(3):
            reply = await rpc(it.channel, "Echo")(ModelInferRequest(model_name="m", id=str(i)))
            assert reply.id == str(i)
        assert made == 0
        with pytest.raises(grpc.aio.AioRpcError):
            async for _ in stream_rpc(it.channel, "ThreeThenAbort", requests=False)(
                ModelInferRequest(model_name="m")
            ):
                pass
        assert made == 0
        for i in range(20):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await rpc(it.channel, f"Unknown{i}")(ModelInferRequest())
            assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED
        bridged = it.server._bridge
        assert bridged is not None and bridged.serving is not None
        assert set(bridged.serving.methods) == {
            f"/{NAME}/Echo".encode(),
            f"/{NAME}/ThreeThenAbort".encode(),
        }


async def test_a_relayed_unary_method_on_grpcs_own_loop_is_internal() -> None:
    """A relayed unary method is served by the relay's loop alone (``Bridge.start``): on a
    ``grpc.server`` started by grpc itself its calls end ``INTERNAL``, never hang."""
    loop = asyncio.get_running_loop()
    relay = bridge.Bridge(loop, internals=bridge.load(), status=unhandled_status)
    pool = ThreadPoolExecutor(1)
    server = grpc.server(pool, options=[("grpc.so_reuseport", 0)])
    echo = relay.handler(grpc.unary_unary_rpc_method_handler(Handlers().echo))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(NAME, {"Echo": echo}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()

    def call() -> None:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            channel.unary_unary(f"/{NAME}/Echo")(b"", timeout=5)

    try:
        with pytest.raises(grpc.RpcError) as caught:
            await asyncio.to_thread(call)
        assert caught.value.code() == grpc.StatusCode.INTERNAL
        assert "reached grpc's loop" in (caught.value.details() or "")
    finally:
        await asyncio.to_thread(server.stop(0).wait)
        await asyncio.to_thread(relay.close)
        pool.shutdown(wait=False)


async def test_the_relays_loop_refuses_a_server_with_a_concurrency_limit() -> None:
    """grpc applies ``maximum_concurrent_rpcs`` (and interceptors) to every call it serves; the
    relay's loop serves unary calls itself, so it refuses such a server rather than skip them."""
    relay = bridge.Bridge(
        asyncio.get_running_loop(), internals=bridge.load(), status=unhandled_status
    )
    pool = ThreadPoolExecutor(1)
    server = grpc.server(pool, maximum_concurrent_rpcs=4)
    try:
        with pytest.raises(ValueError, match="concurrency limit"):
            relay.start(server)
    finally:
        await asyncio.to_thread(relay.close)
        pool.shutdown(wait=False)


def test_the_inline_executor_runs_at_once_and_shares_one_finished_future() -> None:
    from podium.server.grpc.bridge._internals import INLINE

    threads: list[int] = []
    first = INLINE.submit(lambda: threads.append(threading.get_ident()))
    second = INLINE.submit(lambda: None)
    assert threads == [threading.get_ident()]  # run at once, in the submitting thread
    assert first is second and first.done() and first.result() is None
    called: list[Any] = []
    first.add_done_callback(called.append)  # what grpc does with it: run at once
    assert called == [first]
    answered = INLINE.submit(lambda: 7)  # a result is kept in a future of its own
    assert answered is not first and answered.result() == 7

    def fails() -> None:
        raise RuntimeError("a bug")

    failed = INLINE.submit(fails)
    assert failed is not first and isinstance(failed.exception(), RuntimeError)
    assert first.result() is None  # the shared one is untouched


class _Module(SimpleNamespace):
    pass


def _fake_modules(**changes: Any) -> tuple[Any, Any]:
    import grpc._cython.cygrpc as cygrpc
    import grpc._server as real

    fake = _Module(
        **{
            name: getattr(real, name)
            for name in (
                "_status",
                "_receive_message",
                "_Context",
                "_RPCState",
                "_select_thread_pool_for_behavior",
                "_RECEIVE_MESSAGE_TOKEN",
                "_EMPTY_FLAGS",
                "_OPEN",
                "_CLOSED",
                "_CANCELLED",
                "_get_initial_metadata_operation",
                "_get_send_message_op_flags_from_state",
                "_send_message",
                "_reset_per_message_state",
                "_SEND_MESSAGE_TOKEN",
                "_SEND_INITIAL_METADATA_AND_SEND_MESSAGE_TOKEN",
                "_process_event_and_continue",
                "_request_call",
                "_request_registered_call",
                "_stop_serving",
                "_begin_shutdown_once",
                "_application_code",
                "_REQUEST_CALL_TAG",
                "_ServerStage",
                "_ServerState",
                "_Server",
                "_DEALLOCATED_SERVER_CHECK_PERIOD_S",
            )
        }
    )
    for name, value in changes.items():
        if value is None:
            delattr(fake, name)
        else:
            setattr(fake, name, value)
    return fake, cygrpc


async def test_internals_that_differ_turn_the_relay_off() -> None:
    def other_request_call(state: Any, flags: Any) -> None: ...

    assert isinstance(bridge.load(*_fake_modules()), bridge.Internals)
    for changes, named in [
        ({"_request_call": None}, "grpc._server._request_call is missing"),
        ({"_request_call": other_request_call}, "_request_call takes (state, flags)"),
        ({"_EMPTY_FLAGS": None}, "grpc._server._EMPTY_FLAGS is missing"),
        ({"_stop_serving": None}, "grpc._server._stop_serving is missing"),
    ]:
        with pytest.raises(InternalsDiffer) as caught:
            bridge.load(*_fake_modules(**changes))
        assert named in str(caught.value)
    with pytest.raises(InternalsDiffer, match="ReceiveMessageOperation is missing"):
        bridge.load(_fake_modules()[0], SimpleNamespace())


async def test_a_server_state_or_call_that_differs_turns_the_relay_off() -> None:
    import grpc._server as real

    class State(real._ServerState):  # type: ignore[name-defined,misc]
        def __init__(
            self,
            completion_queue: Any,
            server: Any,
            generic_handlers: Any,
            interceptor_pipeline: Any,
            thread_pool: Any,
            maximum_concurrent_rpcs: Any,
        ) -> None:
            super().__init__(
                completion_queue,
                server,
                generic_handlers,
                interceptor_pipeline,
                thread_pool,
                maximum_concurrent_rpcs,
            )
            del self.rpc_states

    with pytest.raises(InternalsDiffer, match="_ServerState has no rpc_states"):
        bridge.load(*_fake_modules(_ServerState=State))
    cygrpc = SimpleNamespace(**vars(_fake_modules()[1]))
    cygrpc.Call = SimpleNamespace()
    with pytest.raises(InternalsDiffer, match="Call.start_server_batch is missing"):
        bridge.load(_fake_modules()[0], cygrpc)


class _StatusWithoutAnswer(bridge.Internals):
    """Internals that end a unary call with an empty answer (as if grpc's message operation
    changed)."""

    def __init__(self, server_module: Any, cygrpc: Any) -> None:
        super().__init__(server_module, cygrpc)
        self.send_op = lambda payload, flags: cygrpc.SendMessageOperation(b"", flags)


class _NeverReceives(bridge.Internals):
    """Internals that never ask grpc for a call (as if grpc's request for calls changed): no
    call of the self-test is ever answered."""

    def __init__(self, server_module: Any, cygrpc: Any) -> None:
        super().__init__(server_module, cygrpc)
        self.request_call = lambda state: None


def _broken(kind: type[bridge.Internals]) -> bridge.Internals:
    import grpc._cython.cygrpc as cygrpc
    import grpc._server as real

    return kind(real, cygrpc)


async def test_the_self_test_passes_through_the_relay() -> None:
    await bridge.self_test(bridge.load(), unhandled_status)


async def test_a_relay_that_answers_wrong_fails_the_self_test_and_falls_back() -> None:
    checked = await bridge.check(unhandled_status, internals=_broken(_StatusWithoutAnswer))
    assert checked.mode is Mode.AIO and checked.internals is None
    assert checked.reason.startswith("the relay's self-test failed: ")
    assert "grpc.aio" in checked.describe() and grpc.__version__ in checked.describe()


async def test_a_relay_that_never_answers_fails_the_self_test_in_time() -> None:
    started = asyncio.get_running_loop().time()
    checked = await bridge.check(
        unhandled_status, internals=_broken(_NeverReceives), time_limit_s=0.5
    )
    assert checked.mode is Mode.AIO
    assert "self-test failed" in checked.reason
    assert asyncio.get_running_loop().time() - started < 5


async def test_a_server_whose_relay_fails_its_self_test_serves_with_grpc_aio(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from podium.server.grpc.bridge import _mode

    monkeypatch.setattr(_mode, "_decided", None)  # decide again, in this process
    monkeypatch.setattr(_mode, "load", lambda: _broken(_StatusWithoutAnswer))
    handlers = Handlers()
    with caplog.at_level(logging.INFO, logger="podium.grpc"):
        server = GrpcServer([service(handlers)], host="127.0.0.1", port=0, max_message_size=1 << 20)
        address = await server.start()
    try:
        assert server.decision is not None and server.decision.mode is Mode.AIO
        assert not server.relayed
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1
        said = warnings[0].getMessage()
        assert address in said and grpc.__version__ in said and "self-test failed" in said
        async with grpc.aio.insecure_channel(address) as channel:
            reply = await rpc(channel, "Echo")(ModelInferRequest(model_name="m", id="1"))
        assert reply.id == "1"
    finally:
        await server.stop()


async def test_a_server_logs_its_mode_once_when_it_starts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="podium.grpc"):
        async with running(service(Handlers()), "relayed", None, grace=1) as it:
            said = [r.getMessage() for r in caplog.records if "gRPC on" in r.getMessage()]
            assert said == [
                f"gRPC on {it.server.address}: calls relayed through grpcio "
                f"{grpc.__version__}'s internals"
            ]


async def test_a_podium_error_that_escapes_a_handler_gets_its_code_from_the_table(
    served: Any,
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await rpc(served.channel, "NotFound")(ModelInferRequest(model_name="ghost"))
    if served.mode == "relayed":
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND
        assert caught.value.details() == "model 'ghost' is not known"
    else:  # grpc.aio's own answer (Podium's handlers let nothing escape: they end in abort_with)
        assert caught.value.code() == grpc.StatusCode.UNKNOWN
        assert "model 'ghost' is not known" in (caught.value.details() or "")


async def test_a_request_the_loop_cannot_take_fails_and_grpc_goes_on(
    served: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    if served.mode != "relayed":
        pytest.skip("only the relay hands requests on from grpc's polling thread")
    loop = asyncio.get_running_loop()
    real = loop.call_soon_threadsafe

    def closed_for_grpc(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name == "podium-grpc-serve":  # the relay's polling thread
            raise RuntimeError("Event loop is closed")
        return real(*args, **kwargs)

    monkeypatch.setattr(loop, "call_soon_threadsafe", closed_for_grpc)

    def call() -> Any:
        with grpc.insecure_channel(served.server.address) as channel:
            return rpc(channel, "Echo")(ModelInferRequest(model_name="m"), timeout=5)

    with pytest.raises(grpc.RpcError) as caught:
        await asyncio.to_thread(call)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "Event loop is closed" in (caught.value.details() or "")
    monkeypatch.undo()
    assert (await asyncio.to_thread(call)).model_name == "m"  # grpc's polling thread lives on


@pytest.mark.parametrize("relay", [True, False], ids=["relayed", "aio"])
async def test_many_streams_run_at_once(relay: bool) -> None:
    """A stream holds no thread: 40 run together (the relayed server's pool has one thread)."""
    started, everyone = 0, asyncio.Event()
    crowd = 40

    async def wait_for_all(request: Any, context: Any) -> Any:
        nonlocal started
        started += 1
        if started == crowd:
            everyone.set()
        await everyone.wait()
        yield ModelInferResponse(model_name=request.model_name)

    methods = {
        "Crowd": grpc.unary_stream_rpc_method_handler(
            wait_for_all,
            request_deserializer=ModelInferRequest.FromString,
            response_serializer=ModelInferResponse.SerializeToString,
        )
    }
    server = GrpcServer(
        [Service(NAME, methods)],
        host="127.0.0.1",
        port=0,
        max_message_size=1 << 20,
        grace=1,
        relay=relay,
    )
    address = await server.start()
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            crowd_call = channel.unary_stream(
                f"/{NAME}/Crowd",
                request_serializer=ModelInferRequest.SerializeToString,
                response_deserializer=ModelInferResponse.FromString,
            )

            async def one(i: int) -> list[str]:
                return [
                    r.model_name async for r in crowd_call(ModelInferRequest(model_name=str(i)))
                ]

            replies = await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(crowd))), 20)
        assert replies == [[str(i)] for i in range(crowd)]
    finally:
        await server.stop()


class StreamHandlers:
    def __init__(self) -> None:
        self.cancelled = asyncio.Event()
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def metadata_both_ways(self, requests: Any, context: Any) -> Any:
        asked = dict(context.invocation_metadata()).get("x-ask", "")
        await context.send_initial_metadata((("x-initial", asked),))
        async for request in requests:
            yield ModelInferResponse(id=request.id)
        context.set_trailing_metadata((("x-trailing", "bye"),))

    async def slow_each(self, requests: Any, context: Any) -> Any:
        async for request in requests:
            self.started.set()
            await self.release.wait()
            yield ModelInferResponse(id=request.id)

    async def echo_each(self, requests: Any, context: Any) -> Any:
        async for request in requests:
            yield ModelInferResponse(model_name=request.model_name, id=request.id)

    async def three_then_abort(self, request: Any, context: Any) -> Any:
        for i in range(3):
            yield ModelInferResponse(id=str(i))
        await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "enough")

    async def one_then_unserializable(self, request: Any, context: Any) -> Any:
        yield ModelInferResponse(id="0")
        yield "not a ModelInferResponse"

    async def endless(self, request: Any, context: Any) -> Any:
        self.started.set()
        try:
            i = 0
            while True:
                yield ModelInferResponse(id=str(i))
                i += 1
                await asyncio.sleep(0.001)
        except (asyncio.CancelledError, GeneratorExit):
            # cancelled in its sleep, or closed at its yield: the call ended while its answer
            # was being written (where grpc.aio's task was when cancelled), and nothing resumes it
            self.cancelled.set()
            raise


@pytest.fixture(params=["relayed", "aio"])
async def streams(request: pytest.FixtureRequest) -> AsyncIterator[SimpleNamespace]:
    handlers = StreamHandlers()
    parse, render = ModelInferRequest.FromString, ModelInferResponse.SerializeToString
    methods = {
        "EchoEach": grpc.stream_stream_rpc_method_handler(
            handlers.echo_each, request_deserializer=parse, response_serializer=render
        ),
        "ThreeThenAbort": grpc.unary_stream_rpc_method_handler(
            handlers.three_then_abort, request_deserializer=parse, response_serializer=render
        ),
        "Endless": grpc.unary_stream_rpc_method_handler(
            handlers.endless, request_deserializer=parse, response_serializer=render
        ),
        "OneThenUnserializable": grpc.unary_stream_rpc_method_handler(
            handlers.one_then_unserializable, request_deserializer=parse, response_serializer=render
        ),
        "MetadataBothWays": grpc.stream_stream_rpc_method_handler(
            handlers.metadata_both_ways, request_deserializer=parse, response_serializer=render
        ),
        "SlowEach": grpc.stream_stream_rpc_method_handler(
            handlers.slow_each, request_deserializer=parse, response_serializer=render
        ),
    }
    async with running(Service(NAME, methods), request.param, handlers, grace=1) as it:
        yield it


def stream_rpc(channel: Any, method: str, *, requests: bool) -> Any:
    make = channel.stream_stream if requests else channel.unary_stream
    return make(
        f"/{NAME}/{method}",
        request_serializer=ModelInferRequest.SerializeToString,
        response_deserializer=ModelInferResponse.FromString,
    )


async def test_a_bidirectional_stream_answers_every_request_in_order(streams: Any) -> None:
    async def requests() -> AsyncIterator[Any]:
        for i in range(200):  # many windows' worth, both ways
            yield ModelInferRequest(model_name="m", id=str(i))

    call = stream_rpc(streams.channel, "EchoEach", requests=True)(requests())
    got = [r.id async for r in call]
    assert got == [str(i) for i in range(200)]
    assert await call.code() == grpc.StatusCode.OK


async def test_an_abort_comes_after_the_items_already_written(streams: Any) -> None:
    call = stream_rpc(streams.channel, "ThreeThenAbort", requests=False)(ModelInferRequest())
    got = []
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for reply in call:
            got.append(reply.id)
    assert got == ["0", "1", "2"]
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert caught.value.details() == "enough"


async def test_a_client_that_leaves_a_stream_cancels_its_handler(streams: Any) -> None:
    call = stream_rpc(streams.channel, "Endless", requests=False)(ModelInferRequest())
    async for reply in call:
        if reply.id == "20":
            break
    call.cancel()
    await asyncio.wait_for(streams.handlers.cancelled.wait(), 5)


async def test_a_streams_metadata_reaches_the_handler_and_comes_back(streams: Any) -> None:
    async def requests() -> AsyncIterator[Any]:
        for i in range(3):
            yield ModelInferRequest(id=str(i))

    call = stream_rpc(streams.channel, "MetadataBothWays", requests=True)(
        requests(), metadata=(("x-ask", "hello"),)
    )
    assert [r.id async for r in call] == ["0", "1", "2"]
    assert ("x-initial", "hello") in list(await call.initial_metadata())
    assert ("x-trailing", "bye") in list(await call.trailing_metadata())
    assert await call.code() == grpc.StatusCode.OK


async def test_a_deadline_cancels_a_streams_handler(streams: Any) -> None:
    call = stream_rpc(streams.channel, "Endless", requests=False)(ModelInferRequest(), timeout=0.5)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in call:
            pass
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    await asyncio.wait_for(streams.handlers.cancelled.wait(), 5)


async def test_a_graceful_stop_lets_a_stream_in_flight_finish(streams: Any) -> None:
    async def requests() -> AsyncIterator[Any]:
        yield ModelInferRequest(id="last")

    call = stream_rpc(streams.channel, "SlowEach", requests=True)(requests())
    got = asyncio.ensure_future(asyncio.wait_for(_ids(call), 10))
    await asyncio.wait_for(streams.handlers.started.wait(), 5)
    stopping = asyncio.ensure_future(streams.server.stop())
    await asyncio.sleep(0.2)
    assert not got.done()
    streams.handlers.release.set()
    assert await got == ["last"]
    assert await call.code() == grpc.StatusCode.OK
    await asyncio.wait_for(stopping, 10)


async def _ids(call: Any) -> list[str]:
    return [r.id async for r in call]


async def test_a_streamed_request_that_does_not_parse_is_invalid_after_the_answers_before_it(
    streams: Any,
) -> None:
    if streams.mode != "relayed":
        pytest.skip("the relay parses streamed requests itself (grpc.aio ends the call)")
    raw = streams.channel.stream_stream(f"/{NAME}/EchoEach")  # bytes as they are

    async def requests() -> AsyncIterator[bytes]:
        yield ModelInferRequest(model_name="m", id="ok").SerializeToString()
        yield b"\x0a\xff\xff\xff"

    call = raw(requests())
    got = []
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for reply in call:
            got.append(ModelInferResponse.FromString(reply).id)
    assert got == ["ok"]
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "does not parse" in (caught.value.details() or "")


async def test_an_answer_that_does_not_serialize_is_internal(served: Any) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await rpc(served.channel, "Unserializable")(ModelInferRequest())
    # grpc's own answers: the thread-pool server's words on the relay, grpc.aio's on grpc.aio
    internal = grpc.StatusCode.INTERNAL if served.mode == "relayed" else grpc.StatusCode.UNKNOWN
    assert caught.value.code() == internal
    assert "serialize" in (caught.value.details() or "").lower()
    await rpc(served.channel, "Echo")(ModelInferRequest(model_name="m"))  # still serving


async def test_a_streamed_item_that_does_not_serialize_ends_the_stream_internal(
    streams: Any,
) -> None:
    call = stream_rpc(streams.channel, "OneThenUnserializable", requests=False)(ModelInferRequest())
    got = []
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for reply in call:
            got.append(reply.id)
    assert got == ["0"]
    internal = grpc.StatusCode.INTERNAL if streams.mode == "relayed" else grpc.StatusCode.UNKNOWN
    assert caught.value.code() == internal


# -- what waits between grpc and the loop on a stream (the relay's window) ---------------------


@pytest.mark.parametrize("mode", ["relayed", "aio"])
async def test_a_request_stream_is_read_ahead_of_its_handler_by_at_most_a_window(
    mode: str,
) -> None:
    """The handler is slow on the first request: no more than a window's worth is received and
    parsed ahead of it (HTTP/2 flow control holds the rest with the client); then every request
    is answered, in order."""
    parsed: list[int] = []
    release = asyncio.Event()

    def parse(data: bytes) -> Any:
        request = ModelInferRequest.FromString(data)
        parsed.append(int(request.id))
        return request

    async def slow_first(requests: Any, context: Any) -> Any:
        async for request in requests:
            if request.id == "0":
                await release.wait()
            yield ModelInferResponse(id=request.id)

    methods = {
        "SlowFirst": grpc.stream_stream_rpc_method_handler(
            slow_first,
            request_deserializer=parse,
            response_serializer=ModelInferResponse.SerializeToString,
        )
    }
    sent = bridge.WINDOW * 4
    async with running(Service(NAME, methods), mode, None, grace=1) as it:

        async def requests() -> AsyncIterator[Any]:
            for i in range(sent):
                yield ModelInferRequest(id=str(i))

        call = stream_rpc(it.channel, "SlowFirst", requests=True)(requests())
        answers = asyncio.ensure_future(_ids(call))
        for _ in range(50):
            await asyncio.sleep(0.01)
        assert 1 <= len(parsed) <= bridge.WINDOW + 1
        release.set()
        assert await asyncio.wait_for(answers, 10) == [str(i) for i in range(sent)]


@pytest.mark.parametrize("mode", ["relayed", "aio"])
async def test_a_response_stream_its_client_does_not_read_stops_its_handler(mode: str) -> None:
    """Large messages, a client that reads one and waits: the handler is held (a window, plus
    what the transport holds), not run to the end; then the client reads them all, in order."""
    written: list[int] = []
    size, count = 1024 * 1024, bridge.WINDOW * 8

    async def large(request: Any, context: Any) -> Any:
        for i in range(count):
            written.append(i)
            yield ModelInferResponse(id=str(i), raw_output_contents=[bytes(size)])

    methods = {
        "Large": grpc.unary_stream_rpc_method_handler(
            large,
            request_deserializer=ModelInferRequest.FromString,
            response_serializer=ModelInferResponse.SerializeToString,
        )
    }
    async with running(
        Service(NAME, methods), mode, None, grace=1, max_message_size=2 * size
    ) as it:
        call = stream_rpc(it.channel, "Large", requests=False)(ModelInferRequest())
        first = await call.read()
        assert first.id == "0"
        for _ in range(50):
            await asyncio.sleep(0.01)
        held = len(written)
        assert held < count // 2, held
        rest = []
        while (reply := await asyncio.wait_for(call.read(), 10)) is not grpc.aio.EOF:
            rest.append(reply.id)
        assert rest == [str(i) for i in range(1, count)]
        assert written == list(range(count))


async def _ids(call: Any) -> list[str]:
    return [reply.id async for reply in call]
