"""A gRPC client that cancels, or whose connection drops, stops the model's work exactly as an HTTP
disconnect does: generators are closed, waiting requests never run, long predicts are cancelled
(and see ``request.is_disconnected()``), and the slots they held serve the next call. Judged by
the models' event logs."""

from __future__ import annotations

import asyncio
import sys
import textwrap
import uuid
from typing import Any

import anyio
import grpc
import pytest
from conftest import Server
from e2e_helpers import PATIENCE, EventLog, Gates
from grpc_helpers import Stubs, infer_request, outputs, target

pytest_plugins = ["e2e_fixtures", "grpc_fixtures"]


async def slot_is_free(aoip_both: Stubs, pb: Any, model: str, tag: str) -> None:
    """The model (predict_concurrency 1) answers a new call at once, long before the abandoned
    call's gate would time out on its own."""
    with anyio.fail_after(PATIENCE / 2):
        responses = [r async for r in aoip_both.ModelStreamInfer(_one(pb, model, tag, 1))]
    assert [outputs(r)["output"] for r in responses] == [[b"w0 "]]


async def _one(pb: Any, model: str, tag: str, n: int, gate: str = "") -> Any:
    yield infer_request(pb, model, tag=tag, n=str(n), gate=gate)


@pytest.mark.anyio
@pytest.mark.parametrize("model", ["streamer", "streamer-sync"])
async def test_cancelled_stream_closes_the_generator_and_frees_its_slot(
    aoip_both: Stubs, pb: Any, events: EventLog, gates: Gates, model: str
) -> None:
    tag = uuid.uuid4().hex
    gate = gates.new()  # shut while the stream lives: the model waits after item 0
    call = aoip_both.ModelStreamInfer(_one(pb, model, tag, 3, gate))
    first = await call.read()
    assert outputs(first)["output"] == [b"w0 "]
    call.cancel()

    # The slot is free at once (for the sync generator even while its thread still waits in
    # the step after item 0): the next call runs meanwhile.
    await slot_is_free(aoip_both, pb, model, tag + "-next")
    gates.open(gate)
    (ended,) = await events.wait_for(tag, "exit")
    expected = (
        ("GeneratorExit",) if model == "streamer-sync" else ("CancelledError", "GeneratorExit")
    )
    assert ended["exc"] in expected
    await events.wait_for(tag, "finally")
    assert "end" not in events.names(tag)
    if model == "streamer":
        order = events.across(tag, tag + "-next")
        assert order.index((tag, "finally")) < order.index((tag + "-next", "start"))


@pytest.mark.anyio
async def test_cancelled_call_cancels_the_predict_which_sees_the_disconnect(
    aoip_both: Stubs, pb: Any, events: EventLog
) -> None:
    tag = uuid.uuid4().hex
    call = aoip_both.ModelInfer(infer_request(pb, "watcher", tag=tag))
    await events.wait_for(tag, "start")
    call.cancel()
    (cancelled,) = await events.wait_for(tag, "cancelled")
    assert cancelled["disconnected"] is True  # `await request.is_disconnected()` in the model
    assert "end" not in events.names(tag)
    # The same model still serves a client that stays.
    response = await aoip_both.ModelInfer(infer_request(pb, "watcher", tag=tag + "-stay", steps=2))
    assert outputs(response)["completed"] == [True]


#: A client that only imports grpc and sends the request it is given, serialized: a process that
#: imports more (numpy, Podium, the test helpers) takes seconds to start on a busy machine, and
#: all of that would count against the wait for the call to reach the model.
_DROPPING_CLIENT = """
import sys, time
import grpc

channel = grpc.insecure_channel(sys.argv[1])
infer = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")  # bytes both ways
future = infer.future(bytes.fromhex(sys.argv[2]))
time.sleep(60)  # killed long before
"""


@pytest.mark.anyio
async def test_a_dropped_connection_cancels_the_predict(
    models_server: Server, aoip_both: Stubs, pb: Any, events: EventLog
) -> None:
    tag = uuid.uuid4().hex
    client = await anyio.open_process(
        [
            sys.executable,
            "-c",
            textwrap.dedent(_DROPPING_CLIENT),
            target(models_server),
            infer_request(pb, "watcher", tag=tag).SerializeToString().hex(),
        ]
    )
    try:
        await events.wait_for(tag, "start")
    finally:
        client.kill()  # no goodbye: the connection just drops
        await client.wait()
        await client.aclose()
    (cancelled,) = await events.wait_for(tag, "cancelled")
    assert cancelled["disconnected"] is True
    assert "end" not in events.names(tag)


@pytest.mark.anyio
async def test_a_call_waiting_for_a_slot_never_runs_once_cancelled(
    aoip_both: Stubs, pb: Any, events: EventLog, gates: Gates
) -> None:
    # gated: predict_concurrency 1 and one waiting place (max_queue_size 1).
    tag = uuid.uuid4().hex
    holder, leaver, follower = f"{tag}-holder", f"{tag}-leaver", f"{tag}-follower"
    gate = gates.new()
    holding = aoip_both.ModelInfer(infer_request(pb, "gated", tag=holder, gate=gate))
    await events.wait_for(holder, "predict-start")
    leaving = aoip_both.ModelInfer(infer_request(pb, "gated", tag=leaver))
    await events.wait_for(leaver, "preprocess")  # it now waits for the slot
    leaving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leaving
    # The waiting place is given back: the follower is admitted, not refused.
    following = aoip_both.ModelInfer(infer_request(pb, "gated", tag=follower))
    await events.wait_for(follower, "preprocess")
    gates.open(gate)
    assert outputs(await holding)["tag"] == [holder.encode()]
    assert outputs(await following)["tag"] == [follower.encode()]
    assert events.names(leaver) == ["preprocess"]  # its predict never ran


@pytest.mark.anyio
@pytest.mark.parametrize("mode", [(), ("--grpc-aio",)], ids=["relayed", "aio"])
async def test_a_server_stopping_lets_calls_in_flight_finish(
    tmp_path: Any, events_path: Any, pb: Any, gates: Gates, mode: tuple[str, ...]
) -> None:
    from conftest import run_server
    from e2e_helpers import SERVE_MODELS

    tag = uuid.uuid4().hex
    gate = gates.new()
    with run_server(
        SERVE_MODELS,
        args=mode,
        env={"PODIUM_E2E_EVENTS": str(events_path)},
    ) as server:
        events = EventLog(events_path)
        async with grpc.aio.insecure_channel(target(server)) as channel:
            stubs = Stubs(channel, pb)
            call = stubs.ModelInfer(infer_request(pb, "gated", tag=tag, gate=gate))
            await events.wait_for(tag, "predict-start")
            server.proc.terminate()  # SIGTERM: graceful shutdown begins
            await anyio.sleep(0.2)
            late = stubs.ModelInfer(infer_request(pb, "tensors", x=1))
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await late
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
            gates.open(gate)
            response = await call  # the call in flight still gets its answer
            assert outputs(response)["tag"] == [tag.encode()]
        assert server.proc.wait(PATIENCE) == 0
