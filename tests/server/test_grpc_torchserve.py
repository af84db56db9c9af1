"""TorchServe's gRPC inference API end to end, through stubs generated from TorchServe's own proto.

The stubs are generated at test time by grpcio-tools from ``protos/torchserve/inference.proto``
(TorchServe's declaration, not Podium's copy), exactly as a TorchServe user generates them, and
every call goes to a real ``podium serve`` over a real socket. Each RPC, the input and output
mapping of docs/protocols.md ("TorchServe gRPC"), every bad input with its status followed by a
good call, StreamPredictions2 with an error in the middle, and client cancellation.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import grpc
import pytest
from conftest import ROOT, Server
from e2e_helpers import PATIENCE, EventLog, Gates
from google.protobuf import descriptor_pool, empty_pb2
from grpc_helpers import target

pytest_plugins = ["e2e_fixtures", "grpc_fixtures"]

SERVICE = "org.pytorch.serve.grpc.inference.InferenceAPIsService"
TS_PROTOS = Path(__file__).resolve().parent / "protos" / "torchserve"
#: google/rpc/status.proto, which TorchServe's proto imports (googleapis' common protos).
RPC_PROTOS = ROOT / "src" / "podium" / "server" / "grpc" / "protos"


# -- stubs and helpers ------------------------------------------------------------------------


@pytest.fixture
async def stub(models_server: Server, ts: SimpleNamespace) -> AsyncIterator[Any]:
    """TorchServe's stubs on a grpc.aio channel to the shared server of tests/models/serve."""
    async with grpc.aio.insecure_channel(target(models_server)) as channel:
        yield ts.grpc.InferenceAPIsServiceStub(channel)


def request(ts: SimpleNamespace, model: str, version: str = "", **fields: Any) -> Any:
    """A PredictionsRequest; an ``input`` value given as a dict is sent as its JSON."""
    inputs = {}
    for name, value in fields.pop("input", {}).items():
        inputs[name] = json.dumps(value).encode() if isinstance(value, dict) else value
    return ts.pb2.PredictionsRequest(
        model_name=model, model_version=version, input=inputs, **fields
    )


def data(ts: SimpleNamespace, model: str, body: dict, **fields: Any) -> Any:
    """The common TorchServe request: one entry ``data`` holding JSON."""
    return request(ts, model, input={"data": body}, **fields)


async def predict(stub: Any, req: Any) -> bytes:
    response = await stub.Predictions(req, timeout=PATIENCE)
    assert not response.HasField("status")
    return response.prediction


async def failure(call: Any) -> grpc.aio.AioRpcError:
    """The error a call ends with; fails the test if it succeeds."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value


async def still_serving(stub: Any, ts: SimpleNamespace) -> None:
    assert await predict(stub, data(ts, "emit", {"kind": "number"})) == b"42"


def info(prediction: bytes) -> Any:
    return json.loads(json.loads(prediction)["info"])


# -- Ping ----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_ping_is_healthy(stub: Any, ts: SimpleNamespace) -> None:
    response = await stub.Ping(empty_pb2.Empty(), timeout=PATIENCE)
    assert json.loads(response.health) == {"status": "Healthy"}


@pytest.mark.anyio
async def test_ping_is_partial_healthy_while_a_model_is_not_ready(
    failing_server: Server, ts: SimpleNamespace
) -> None:
    async with grpc.aio.insecure_channel(target(failing_server)) as channel:
        stub = ts.grpc.InferenceAPIsServiceStub(channel)
        response = await stub.Ping(empty_pb2.Empty(), timeout=PATIENCE)
        assert json.loads(response.health) == {"status": "Partial Healthy"}
        # A model that failed to load is UNAVAILABLE, with the reason; its neighbour serves.
        error = await failure(stub.Predictions(data(ts, "failing", {}), timeout=PATIENCE))
        assert error.code() is grpc.StatusCode.UNAVAILABLE
        assert "'failing'" in error.details()
        assert "the weights file is missing (on purpose)" in error.details()
        assert json.loads(await predict(stub, data(ts, "fine", {}))) == {"fine": True}


@pytest.mark.anyio
async def test_health_and_reflection_know_the_service(models_server: Server) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
        ProtoReflectionDescriptorDatabase,
    )

    async with grpc.aio.insecure_channel(target(models_server)) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        checked = await health.Check(health_pb2.HealthCheckRequest(service=SERVICE))
        assert checked.status == health_pb2.HealthCheckResponse.SERVING
    # A client that knows nothing but reflection (grpcurl) finds every message, with the
    # google.rpc.Status that StreamPredictions2's in-band errors use.
    with grpc.insecure_channel(target(models_server)) as channel:
        database = ProtoReflectionDescriptorDatabase(channel)
        assert SERVICE in set(database.get_services())
        service = descriptor_pool.DescriptorPool(database).FindServiceByName(SERVICE)
        methods = {m.name: (m.client_streaming, m.server_streaming) for m in service.methods}
        assert methods == {
            "Ping": (False, False),
            "Predictions": (False, False),
            "StreamPredictions": (False, True),
            "StreamPredictions2": (True, True),
        }
        response = service.methods_by_name["Predictions"].output_type
        assert response.fields_by_name["status"].message_type.full_name == "google.rpc.Status"
        assert [f.number for f in response.fields] == [1, 2, 3]


# -- Predictions: what the model receives --------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("name", ["data", "body"])
async def test_one_body_entry_arrives_as_bytes(stub: Any, ts: SimpleNamespace, name: str) -> None:
    # As a TorchServe HTTP body without a JSON content type: gRPC carries no content type.
    req = request(ts, "probe", input={name: b'{"a": [1]}'})
    assert info(await predict(stub, req)) == {"bytes": '{"a": [1]}'}


@pytest.mark.anyio
async def test_other_entries_arrive_as_a_dict_of_bytes(stub: Any, ts: SimpleNamespace) -> None:
    req = request(ts, "probe", input={"data": b"\x89PNG", "frame": b"7"})
    assert info(await predict(stub, req)) == {
        "dict": {"data": {"bytes": "\x89PNG"}, "frame": {"bytes": "7"}}
    }
    req = request(ts, "probe", input={"image": b"\x00\x01"})
    assert info(await predict(stub, req)) == {"dict": {"image": {"bytes": "\x00\x01"}}}


@pytest.mark.anyio
async def test_no_entry_is_an_empty_body(stub: Any, ts: SimpleNamespace) -> None:
    assert info(await predict(stub, request(ts, "probe"))) == {"bytes": ""}


@pytest.mark.anyio
async def test_annotated_models_parse_the_body(stub: Any, ts: SimpleNamespace) -> None:
    order = {"item": "tea", "qty": 2}
    assert info(await predict(stub, data(ts, "probe-schema", order))) == {
        "type": "Order",
        "data": {"item": "tea", "qty": 2, "tags": []},
    }
    oip = {"inputs": [{"name": "x", "shape": [1], "datatype": "INT64", "data": [3]}]}
    got = info(await predict(stub, data(ts, "probe-oip", oip)))
    assert got["type"] == "InferenceRequest"
    assert got["request"]["inputs"][0]["data"] == [3]


@pytest.mark.anyio
async def test_annotated_models_take_a_dict_of_entries(stub: Any, ts: SimpleNamespace) -> None:
    req = request(ts, "probe-schema", input={"item": b"tea", "qty": b"2"})
    assert info(await predict(stub, req)) == {
        "type": "Order",
        "data": {"item": "tea", "qty": 2, "tags": []},
    }


@pytest.mark.anyio
@pytest.mark.parametrize("model", ["probe-oip", "probe-schema"])
@pytest.mark.parametrize(
    "inputs", [{}, {"x": b"1", "y": b"2"}], ids=["empty", "not-an-inference-request"]
)
async def test_annotated_models_refuse_what_they_cannot_take(
    stub: Any, ts: SimpleNamespace, model: str, inputs: dict[str, bytes]
) -> None:
    if model == "probe-schema" and inputs:
        inputs = {"item": b"tea"}  # qty missing
    error = await failure(stub.Predictions(request(ts, model, input=inputs), timeout=PATIENCE))
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT, error.details()
    await still_serving(stub, ts)


@pytest.mark.anyio
async def test_the_request_object_carries_metadata_body_and_sequence_id(
    stub: Any, ts: SimpleNamespace
) -> None:
    req = request(ts, "headers", input={"data": b"hello"}, sequence_id="seq-7")
    response = await stub.Predictions(req, metadata=(("x-trace", "abc"),), timeout=PATIENCE)
    assert response.sequence_id == "seq-7"
    got = info(response.prediction)
    assert got["body"] == "hello"
    assert got["method"] == "POST"
    assert got["path"] == "/org.pytorch.serve.grpc.inference.InferenceAPIsService/Predictions"
    assert got["headers"]["x-trace"] == "abc"
    assert got["headers"]["ts_request_sequence_id"] == "seq-7"
    assert got["disconnected"] is False
    # Any other map has no one body: the model gets the dict, the request an empty body.
    got = info(await predict(stub, request(ts, "headers", input={"a": b"1", "b": b"2"})))
    assert (got["inputs"], got["body"]) == (["a", "b"], "")
    assert "ts_request_sequence_id" not in got["headers"]


@pytest.mark.anyio
async def test_a_model_taking_only_the_request_reads_the_body_itself(
    stub: Any, ts: SimpleNamespace
) -> None:
    got = json.loads(await predict(stub, request(ts, "rawbody", input={"body": b"x" * 300})))
    assert got["size"] == 300 and got["method"] == "POST"


@pytest.mark.anyio
@pytest.mark.parametrize(("version", "reached"), [("", "10"), ("1", "1"), ("2", "2"), ("10", "10")])
async def test_model_version_selects_the_version(
    stub: Any, ts: SimpleNamespace, version: str, reached: str
) -> None:
    req = request(ts, "versioned", version, input={"data": b"{}"})
    assert json.loads(await predict(stub, req)) == {"version": reached}


@pytest.mark.anyio
@pytest.mark.parametrize("version", ["", "1"])
async def test_an_unversioned_model_answers_to_version_1(
    stub: Any, ts: SimpleNamespace, version: str
) -> None:
    req = request(ts, "emit", version, input={"data": {"kind": "list"}})
    assert await predict(stub, req) == b"[1.5,2.5]"
    error = await failure(stub.Predictions(request(ts, "emit", "2", input={"data": b"{}"})))
    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert (
        "Request for unknown model: 'emit' version 2 is not found (versions: 1 (unversioned))"
        in error.details()
    )


# -- Predictions: how results come back ----------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("bytes", b"raw bytes"),
        ("badbytes", b"\xff\xfe\x00"),  # bytes are sent as they are, UTF-8 or not
        ("str", "héllo wörld".encode()),
        ("number", b"42"),
        ("float", b"0.25"),
        ("bool", b"true"),
        ("none", b"null"),
        ("list", b"[1.5,2.5]"),
        ("ndarray", b"[[0,1,2],[3,4,5]]"),
        ("nested", b'{"outer":{"inner":1}}'),
        ("dict", b'{"f":[[1.0,2.0]],"i":3,"s":"hi","l":[1,2,3]}'),
    ],
)
async def test_results_are_encoded_as_the_http_route_encodes_them(
    stub: Any, ts: SimpleNamespace, kind: str, expected: bytes
) -> None:
    assert await predict(stub, data(ts, "emit", {"kind": kind})) == expected


@pytest.mark.anyio
async def test_an_inference_response_comes_back_as_json(stub: Any, ts: SimpleNamespace) -> None:
    got = json.loads(await predict(stub, data(ts, "emit", {"kind": "response"})))
    assert [o["name"] for o in got["outputs"]] == ["a", "b"]


@pytest.mark.anyio
async def test_a_generator_model_is_gathered(stub: Any, ts: SimpleNamespace, tag: str) -> None:
    req = data(ts, "streamer", {"tag": tag, "n": 3})
    assert await predict(stub, req) == b"w0 w1 w2 "


# -- errors: each status, then a good call -------------------------------------------------


BAD_REQUESTS = [
    # (model, version, input, code, words in the message)
    pytest.param("no-such-model", "", {}, "NOT_FOUND", "no-such-model", id="unknown-model"),
    pytest.param("versioned", "3", {}, "NOT_FOUND", "version 3", id="unknown-version"),
    pytest.param("", "", {}, "INVALID_ARGUMENT", "model_name is required", id="no-model-name"),
    pytest.param(
        "probe-oip", "", {"data": b"{"}, "INVALID_ARGUMENT", "probe-oip", id="not-an-oip-request"
    ),
    pytest.param(
        "probe-schema", "", {"data": b'{"qty": "x"}'}, "INVALID_ARGUMENT", "qty", id="schema"
    ),
    pytest.param(
        "raiser",
        "",
        {"why": b"too cold"},
        "INTERNAL",
        "the model refused: b'too cold'",
        id="model-raised",
    ),
    pytest.param(
        "emit", "", {"data": b'{"kind": "object"}'}, "INVALID_ARGUMENT", "'emit'", id="not-json"
    ),
]


@pytest.mark.anyio
@pytest.mark.parametrize(("model", "version", "inputs", "code", "words"), BAD_REQUESTS)
@pytest.mark.parametrize("rpc", ["Predictions", "StreamPredictions"])
async def test_bad_requests_get_their_status_and_the_server_still_serves(
    stub: Any,
    ts: SimpleNamespace,
    rpc: str,
    model: str,
    version: str,
    inputs: dict[str, bytes],
    code: str,
    words: str,
) -> None:
    call = getattr(stub, rpc)(request(ts, model, version, input=inputs), timeout=PATIENCE)
    items: list[Any] = []

    async def drain() -> None:
        async for item in call:
            items.append(item)

    error = await failure(drain() if rpc == "StreamPredictions" else call)
    assert items == []
    assert error.code() is grpc.StatusCode[code], error.details()
    assert words in error.details()
    await still_serving(stub, ts)


@pytest.mark.anyio
async def test_queue_full_is_unavailable_and_the_queue_drains(
    stub: Any, ts: SimpleNamespace, events: EventLog, gates: Gates, tag: str
) -> None:
    # gated: one slot, one waiting place. First holds the slot, second waits, third is refused.
    gate = gates.new()
    answers: dict[str, bytes] = {}

    async def call(name: str, body: dict) -> None:
        answers[name] = await predict(stub, data(ts, "gated", body))

    async with anyio.create_task_group() as tg:
        tg.start_soon(call, "first", {"tag": f"{tag}-first", "gate": gate})
        await events.wait_for(f"{tag}-first", "predict-start")
        tg.start_soon(call, "second", {"tag": f"{tag}-second"})
        await events.wait_for(f"{tag}-second", "preprocess")
        error = await failure(stub.Predictions(data(ts, "gated", {"tag": f"{tag}-third"})))
        assert error.code() is grpc.StatusCode.UNAVAILABLE
        assert "'gated'" in error.details() and "queue is full" in error.details()
        gates.open(gate)
    assert json.loads(answers["first"]) == {"tag": f"{tag}-first"}
    assert json.loads(answers["second"]) == {"tag": f"{tag}-second"}
    assert json.loads(await predict(stub, data(ts, "gated", {"tag": f"{tag}-fourth"}))) == {
        "tag": f"{tag}-fourth"
    }


# -- StreamPredictions ---------------------------------------------------------------------


async def stream(stub: Any, req: Any) -> list[Any]:
    return [r async for r in stub.StreamPredictions(req, timeout=PATIENCE)]


@pytest.mark.anyio
@pytest.mark.parametrize("model", ["streamer", "streamer-sync"])
@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("text", [b"w0 ", b"w1 ", b"w2 "]),
        ("bytes", [b"b0;", b"b1;", b"b2;"]),
        ("json", [b'{"i":0,"sq":0}', b'{"i":1,"sq":1}', b'{"i":2,"sq":4}']),
    ],
)
async def test_one_response_per_item(
    stub: Any, ts: SimpleNamespace, tag: str, model: str, mode: str, expected: list[bytes]
) -> None:
    responses = await stream(stub, data(ts, model, {"tag": tag, "n": 3, "mode": mode}))
    assert [r.prediction for r in responses] == expected
    assert not any(r.HasField("status") or r.HasField("sequence_id") for r in responses)


@pytest.mark.anyio
async def test_a_plain_model_streams_one_response(stub: Any, ts: SimpleNamespace) -> None:
    responses = await stream(stub, data(ts, "emit", {"kind": "dict"}))
    assert len(responses) == 1
    assert json.loads(responses[0].prediction)["i"] == 3


@pytest.mark.anyio
async def test_an_error_after_the_first_item_ends_the_stream_with_internal(
    stub: Any, ts: SimpleNamespace, tag: str
) -> None:
    items: list[bytes] = []

    async def drain() -> None:
        call = stub.StreamPredictions(data(ts, "streamer", {"tag": tag, "mode": "fail"}))
        async for response in call:
            items.append(response.prediction)

    error = await failure(drain())
    assert items == [b'{"i":0,"sq":0}']
    assert error.code() is grpc.StatusCode.INTERNAL
    assert "the stream failed after item 0" in error.details()
    await still_serving(stub, ts)


# -- StreamPredictions2 --------------------------------------------------------------------


@pytest.mark.anyio
async def test_stream2_answers_in_order_with_errors_in_band(
    stub: Any, ts: SimpleNamespace, tag: str
) -> None:
    requests = [
        data(ts, "emit", {"kind": "number"}, sequence_id="s-1"),
        data(ts, "no-such-model", {}, sequence_id="s-2"),
        request(ts, "raiser", input={"why": b"mid-stream"}, sequence_id="s-3"),
        data(ts, "emit", {"kind": "str"}, sequence_id="s-4"),
        request(ts, "versioned", "2", input={"data": b"{}"}),  # no sequence_id
        data(ts, "streamer", {"tag": tag, "n": 2}, sequence_id="s-6"),
        data(ts, "streamer", {"tag": tag, "mode": "failfirst"}, sequence_id="s-7"),
        data(ts, "emit", {"kind": "list"}, sequence_id="s-8"),
    ]

    async def send() -> AsyncIterator[Any]:
        for req in requests:
            yield req

    got = [r async for r in stub.StreamPredictions2(send(), timeout=PATIENCE)]
    summary = [
        (
            r.sequence_id if r.HasField("sequence_id") else None,
            r.prediction,
            grpc.StatusCode.OK.value[0] if not r.HasField("status") else r.status.code,
        )
        for r in got
    ]
    not_found = grpc.StatusCode.NOT_FOUND.value[0]
    internal = grpc.StatusCode.INTERNAL.value[0]
    assert summary == [
        ("s-1", b"42", 0),
        ("s-2", b"", not_found),
        ("s-3", b"", internal),
        ("s-4", "héllo wörld".encode(), 0),
        (None, b'{"version":"2"}', 0),
        ("s-6", b"w0 ", 0),  # a generator's items: one response each
        ("s-6", b"w1 ", 0),
        ("s-7", b"", internal),
        ("s-8", b"[1.5,2.5]", 0),
    ]
    assert "no-such-model" in got[1].status.message
    assert "the model refused: b'mid-stream'" in got[2].status.message
    assert "the stream failed before its first item" in got[7].status.message


@pytest.mark.anyio
async def test_stream2_answers_each_request_before_the_next_is_sent(
    stub: Any, ts: SimpleNamespace
) -> None:
    # A client that waits for each answer before sending on: the stream stays open between.
    call = stub.StreamPredictions2(timeout=PATIENCE)
    for i, kind in enumerate(["number", "object", "bool"]):
        await call.write(data(ts, "emit", {"kind": kind}, sequence_id=f"seq-{i}"))
        response = await call.read()
        assert response.sequence_id == f"seq-{i}"
        if kind == "object":
            assert response.status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
            assert "'emit'" in response.status.message
        else:
            assert response.prediction == {"number": b"42", "bool": b"true"}[kind]
    await call.done_writing()
    assert await call.read() is grpc.aio.EOF
    assert await call.code() is grpc.StatusCode.OK


@pytest.mark.anyio
async def test_stream2_passes_the_sequence_id_to_the_model(stub: Any, ts: SimpleNamespace) -> None:
    async def send() -> AsyncIterator[Any]:
        yield request(ts, "headers", input={"data": b"one"}, sequence_id="abc")
        yield request(ts, "headers", input={"data": b"two"})

    got = [r async for r in stub.StreamPredictions2(send(), timeout=PATIENCE)]
    assert [r.sequence_id if r.HasField("sequence_id") else None for r in got] == ["abc", None]
    first, second = (info(r.prediction) for r in got)
    assert first["headers"]["ts_request_sequence_id"] == "abc" and first["body"] == "one"
    assert "ts_request_sequence_id" not in second["headers"] and second["body"] == "two"
    assert first["path"].endswith("/StreamPredictions2")


# -- client cancellation ---------------------------------------------------------------------


async def slot_is_free(stub: Any, ts: SimpleNamespace, model: str, tag: str) -> None:
    """The model (predict_concurrency 1) runs a new request at once."""
    with anyio.fail_after(PATIENCE / 2):
        assert await predict(stub, data(ts, model, {"tag": tag, "n": 1})) == b"w0 "


@pytest.mark.anyio
@pytest.mark.parametrize("rpc", ["StreamPredictions", "StreamPredictions2"])
async def test_cancelling_a_stream_closes_the_async_generator_and_frees_its_slot(
    stub: Any, ts: SimpleNamespace, events: EventLog, gates: Gates, tag: str, rpc: str
) -> None:
    gate = gates.new()  # never opened while the stream lives: the model waits after item 0
    req = data(ts, "streamer", {"tag": tag, "n": 3, "gate": gate}, sequence_id="s")
    if rpc == "StreamPredictions":
        call = stub.StreamPredictions(req, timeout=PATIENCE)
    else:
        call = stub.StreamPredictions2(timeout=PATIENCE)
        await call.write(req)
    first = await call.read()
    assert first.prediction == b"w0 "
    call.cancel()
    (ended,) = await events.wait_for(tag, "exit")
    assert ended["exc"] in ("CancelledError", "GeneratorExit")
    await events.wait_for(tag, "finally")
    assert "end" not in events.names(tag)
    assert "gate-timeout" not in events.names(tag)
    await slot_is_free(stub, ts, "streamer", tag + "-next")
    order = events.across(tag, tag + "-next")
    assert order.index((tag, "finally")) < order.index((tag + "-next", "start"))


@pytest.mark.anyio
async def test_cancelling_a_stream_closes_the_sync_generator_and_frees_its_slot(
    stub: Any, ts: SimpleNamespace, events: EventLog, gates: Gates, tag: str
) -> None:
    gate = gates.new()
    call = stub.StreamPredictions(
        data(ts, "streamer-sync", {"tag": tag, "n": 3, "gate": gate}), timeout=PATIENCE
    )
    assert (await call.read()).prediction == b"w0 "
    call.cancel()
    # The slot is free at once, even while the generator's thread waits in its next step.
    await slot_is_free(stub, ts, "streamer-sync", tag + "-next")
    gates.open(gate)
    (ended,) = await events.wait_for(tag, "exit")
    assert ended["exc"] == "GeneratorExit"
    await events.wait_for(tag, "finally")
    assert "end" not in events.names(tag)


@pytest.mark.anyio
async def test_cancelling_predictions_cancels_the_model_which_sees_the_disconnect(
    stub: Any, ts: SimpleNamespace, events: EventLog, tag: str
) -> None:
    call = stub.Predictions(data(ts, "watcher", {"tag": tag}), timeout=PATIENCE)
    await events.wait_for(tag, "start")
    call.cancel()
    (cancelled,) = await events.wait_for(tag, "cancelled")
    assert cancelled["disconnected"] is True
    assert "end" not in events.names(tag)
    got = await predict(stub, data(ts, "watcher", {"tag": tag + "-stay", "steps": 2}))
    assert json.loads(got) == {"completed": True}


@pytest.mark.anyio
async def test_a_request_waiting_for_a_slot_never_runs_once_cancelled(
    stub: Any, ts: SimpleNamespace, events: EventLog, gates: Gates, tag: str
) -> None:
    holder, leaver, follower = f"{tag}-holder", f"{tag}-leaver", f"{tag}-follower"
    gate = gates.new()
    answers: dict[str, bytes] = {}

    async def call(name: str, body: dict) -> None:
        answers[name] = await predict(stub, data(ts, "gated", body))

    async with anyio.create_task_group() as tg:
        tg.start_soon(call, "holder", {"tag": holder, "gate": gate})
        await events.wait_for(holder, "predict-start")
        leaving = stub.Predictions(data(ts, "gated", {"tag": leaver}), timeout=PATIENCE)
        await events.wait_for(leaver, "preprocess")  # it now waits for the slot
        leaving.cancel()
        # Ping round trips until the server has dropped the waiter: then the follower is
        # admitted to the one waiting place instead of being refused.
        for _ in range(5):
            await stub.Ping(empty_pb2.Empty(), timeout=PATIENCE)
        tg.start_soon(call, "follower", {"tag": follower})
        await events.wait_for(follower, "preprocess")
        gates.open(gate)
    assert json.loads(answers["holder"]) == {"tag": holder}
    assert json.loads(answers["follower"]) == {"tag": follower}
    assert events.names(leaver) == ["preprocess"]  # its predict never ran


@pytest.mark.anyio
@pytest.mark.parametrize("rpc", ["Predictions", "StreamPredictions"])
async def test_a_returned_response_sends_its_body_and_its_headers_as_metadata(
    models_server: Server, ts: SimpleNamespace, rpc: str
) -> None:
    async with grpc.aio.insecure_channel(target(models_server)) as channel:
        stub = ts.grpc.InferenceAPIsServiceStub(channel)
        req = request(ts, "emit", input={"data": b'{"kind": "starlette"}'})
        if rpc == "Predictions":
            call = stub.Predictions(req)
            response = await call
            predictions = [response.prediction]
        else:
            call = stub.StreamPredictions(req)
            predictions = [r.prediction async for r in call]
        metadata = dict(await call.initial_metadata())
    assert predictions == [b"made by the model"]
    assert metadata["x-made-by"] == "emit"
    assert "content-type" not in metadata or metadata["content-type"] == "application/grpc"


# -- handlers written for TorchServe, over TorchServe's gRPC ---------------------------------


@pytest.fixture(scope="module")
def handlers_server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``class-style`` and ``streamer`` from tests/models/torchserve, archived by `podium
    archive` and served."""
    from conftest import TEST_MODELS, run_server

    store = tmp_path_factory.mktemp("ts-grpc-store")
    mars = []
    for name in ("class-style", "streamer"):
        src = TEST_MODELS / "torchserve" / name
        cmd = [sys.executable, "-m", "podium", "archive", "--model-name", name,
               "--handler", str(src / "handler.py"), "--export-path", str(store)]  # fmt: skip
        if (src / "model-config.yaml").exists():
            cmd += ["--config-file", str(src / "model-config.yaml")]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        mars.append(store / f"{name}.mar")
    with run_server(*mars) as server:
        yield server


@pytest.mark.anyio
async def test_handler_headers_become_metadata_and_error_statuses_become_codes(
    handlers_server: Server, ts: SimpleNamespace
) -> None:
    async with grpc.aio.insecure_channel(target(handlers_server)) as channel:
        stub: Any = ts.grpc.InferenceAPIsServiceStub(channel)
        call = stub.Predictions(
            data(ts, "class-style", {"q": 1}), metadata=(("x-custom", "abc"),), timeout=PATIENCE
        )
        response = await call
        body = json.loads(response.prediction)
        assert body["header"] == "abc" and body["greeting"] == "hello"
        metadata = dict(await call.initial_metadata())
        assert metadata["x-handled-by"] == "class-style"
        # An HTTP error status set by the handler ends the call with the code errors.py's one
        # table gives it (as a Truss model's HTTPException): another 4xx is UNKNOWN.
        for status, code in (("404", grpc.StatusCode.NOT_FOUND), ("418", grpc.StatusCode.UNKNOWN)):
            error = await failure(
                stub.Predictions(
                    data(ts, "class-style", {"q": 2}),
                    metadata=(("x-want-status", status),),
                    timeout=PATIENCE,
                )
            )
            assert error.code() == code
            assert f"HTTP {status}" in (error.details() or "")
        # Streamed items come one per response; the handler's headers are the metadata. The
        # handler reads the entry named "body": entries reach it under the names sent.
        words = request(ts, "streamer", input={"body": {"text": "one two three"}})
        stream = stub.StreamPredictions(words, timeout=PATIENCE)
        items = [r.prediction async for r in stream]
        assert b"".join(items) == b"one two three" and len(items) == 3
        assert dict(await stream.initial_metadata())["x-streamed"] == "yes"
        # Over unary Predictions the first item answers, as TorchServe 0.12 answers (issue 22).
        first = await stub.Predictions(words, timeout=PATIENCE)
        assert first.prediction == b"one "


@pytest.mark.anyio
async def test_stream2_answers_a_message_that_does_not_parse_in_band_and_goes_on(
    models_server: Server, ts: SimpleNamespace
) -> None:
    good = data(ts, "emit", {"kind": "number"}, sequence_id="s-1").SerializeToString()
    async with grpc.aio.insecure_channel(target(models_server)) as channel:
        raw = channel.stream_stream(
            "/org.pytorch.serve.grpc.inference.InferenceAPIsService/StreamPredictions2"
        )

        async def send() -> AsyncIterator[bytes]:
            yield good
            yield b"\x0a\xff\xff\xff"  # not a PredictionsRequest
            yield good

        got = [ts.pb2.PredictionResponse.FromString(r) async for r in raw(send(), timeout=PATIENCE)]
    invalid = grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert [(r.prediction, r.status.code) for r in got] == [(b"42", 0), (b"", invalid), (b"42", 0)]
    assert "does not parse" in got[1].status.message
