"""Every bad input gets its gRPC status from the one table in errors.py, with a message that names
the thing, and the next good call on the same channel still succeeds."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as triton
from conftest import Server
from e2e_helpers import MAX_REQUEST_SIZE, PATIENCE, EventLog, Gates
from grpc_helpers import Stubs, infer_request, outputs, target

pytest_plugins = ["e2e_fixtures", "grpc_fixtures"]

StatusCode = grpc.StatusCode


def good_call(oip: Stubs, pb: Any) -> None:
    response = oip.ModelInfer(infer_request(pb, "tensors", x=("INT32", [2], [1, 2])))
    assert outputs(response)["x"] == [1, 2]


def fails(call: Callable[[], Any]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    return caught.value


def raw_request(pb: Any, model: str, tensors: list[tuple[str, str, list[int], bytes]]) -> Any:
    request = pb.ModelInferRequest(model_name=model)
    for name, datatype, shape, data in tensors:
        request.inputs.add(name=name, datatype=datatype, shape=shape)
        request.raw_input_contents.append(data)
    return request


def typed_fp16(pb: Any) -> Any:
    request = pb.ModelInferRequest(model_name="tensors")
    tensor = request.inputs.add(name="half", datatype="FP16", shape=[1])
    tensor.contents.fp32_contents.append(1.5)
    return request


def wrong_field(pb: Any) -> Any:
    request = pb.ModelInferRequest(model_name="tensors")
    tensor = request.inputs.add(name="w", datatype="INT32", shape=[1])
    tensor.contents.int64_contents.append(1)
    return request


def raw_and_typed(pb: Any) -> Any:
    request = raw_request(pb, "tensors", [("a", "INT8", [1], b"\x01")])
    request.inputs.add(name="b", datatype="INT8", shape=[1]).contents.int_contents.append(1)
    request.raw_input_contents.append(b"\x01")
    return request


def raw_count(pb: Any) -> Any:
    request = raw_request(pb, "tensors", [("a", "INT8", [1], b"\x01")])
    request.inputs.add(name="b", datatype="INT8", shape=[1])
    return request


def asking_for_missing(pb: Any) -> Any:
    request = infer_request(pb, "tensors", x=1)
    request.outputs.add(name="missing")
    return request


# (case, request builder, status code, words the message holds)
BAD_INFERS: list[tuple[str, Callable[[Any], Any], StatusCode, list[str]]] = [
    ("unknown model", lambda pb: infer_request(pb, "nope", x=1), StatusCode.NOT_FOUND, ["'nope'"]),
    (
        "unknown version",
        lambda pb: pb.ModelInferRequest(model_name="versioned", model_version="7"),
        StatusCode.NOT_FOUND,
        ["Request for unknown model: 'versioned' version 7 is not found", "1, 2, 10"],
    ),
    (
        "element count",
        lambda pb: infer_request(pb, "tensors", bad=("INT32", [3], [1, 2])),
        StatusCode.INVALID_ARGUMENT,
        ["input 'bad'", "3 elements", "2 data elements"],
    ),
    (
        "out of range",
        lambda pb: infer_request(pb, "tensors", small=("INT8", [1], [300])),
        StatusCode.INVALID_ARGUMENT,
        ["input 'small'", "300"],
    ),
    (
        "raw size",
        lambda pb: raw_request(pb, "tensors", [("r", "FP32", [2], b"\x00" * 7)]),
        StatusCode.INVALID_ARGUMENT,
        ["input 'r'"],
    ),
    (
        "raw bytes truncated",
        lambda pb: raw_request(pb, "tensors", [("s", "BYTES", [1], b"\x05\x00\x00\x00ab")]),
        StatusCode.INVALID_ARGUMENT,
        ["input 's'"],
    ),
    ("raw count", raw_count, StatusCode.INVALID_ARGUMENT, ["2 inputs", "1 raw_input_contents"]),
    (
        "raw and typed",
        raw_and_typed,
        StatusCode.INVALID_ARGUMENT,
        # Triton's words (its examples match on them), then Podium's rule
        [
            "contents field must not be specified when using raw_input_contents for 'b' for model 'tensors'"
        ],
    ),
    ("typed FP16", typed_fp16, StatusCode.INVALID_ARGUMENT, ["input 'half'", "FP16", "raw"]),
    ("wrong field", wrong_field, StatusCode.INVALID_ARGUMENT, ["input 'w'", "int_contents"]),
    (
        "unknown datatype",
        lambda pb: infer_request(pb, "tensors", q=("INT4", [1], [])),
        StatusCode.INVALID_ARGUMENT,
        ["input 'q'", "INT4"],
    ),
    (
        "model raised",
        lambda pb: infer_request(pb, "raiser", why="told to"),
        StatusCode.INTERNAL,
        ["model 'raiser'", "ValueError", "the model refused"],
    ),
    (
        "result not representable",
        lambda pb: infer_request(pb, "emit", kind="none"),
        StatusCode.INVALID_ARGUMENT,
        ["model 'emit'", "cannot carry"],
    ),
    (
        "unknown output asked for",
        asking_for_missing,
        StatusCode.INVALID_ARGUMENT,
        ["'missing'", "x, kinds"],
    ),
]


@pytest.mark.parametrize(
    ("build", "code", "words"),
    [pytest.param(b, c, w, id=name) for name, b, c, w in BAD_INFERS],
)
def test_bad_infer_then_a_good_one(
    oip: Stubs, pb: Any, build: Callable[[Any], Any], code: StatusCode, words: list[str]
) -> None:
    error = fails(lambda: oip.ModelInfer(build(pb)))
    assert error.code() == code, error.details()
    for word in words:
        assert word in error.details()
    good_call(oip, pb)


def test_unknown_model_in_metadata(oip: Stubs, pb: Any) -> None:
    error = fails(lambda: oip.ModelMetadata(pb.ModelMetadataRequest(name="nope")))
    assert (error.code(), "Request for unknown model: 'nope' is not found" in error.details()) == (
        StatusCode.NOT_FOUND,
        True,
    )
    good_call(oip, pb)


def test_an_unknown_model_or_version_is_not_ready(
    oip: Stubs, pb: Any, models_server: Server
) -> None:
    # As Triton: ModelReady answers ready: false (not NOT_FOUND), so that tritonclient's
    # is_model_ready returns False rather than raising.
    for name, version in (("nope", ""), ("versioned", "7"), ("", "")):
        answer = oip.ModelReady(pb.ModelReadyRequest(name=name, version=version))
        assert answer.ready is False, (name, version)
    client = triton.InferenceServerClient(target(models_server))
    assert client.is_model_ready("nope") is False
    assert client.is_model_ready("versioned", "7") is False
    assert client.is_model_ready("versioned", "2") is True
    good_call(oip, pb)


def test_a_model_that_failed_to_load_is_unavailable(failing_server: Server) -> None:
    client = triton.InferenceServerClient(target(failing_server))
    x = triton.InferInput("x", [1], "INT64")
    x.set_data_from_numpy(np.array([1]))
    with pytest.raises(triton.InferenceServerException) as caught:
        client.infer("failing", [x])
    assert caught.value.status() == "StatusCode.UNAVAILABLE"
    assert "model 'failing' is not ready" in caught.value.message()
    assert "the weights file is missing (on purpose)" in caught.value.message()
    assert not client.is_model_ready("failing")
    assert not client.is_server_ready()
    assert client.infer("fine", [x]).as_numpy("fine").tolist() == [True]


def test_an_oversize_message_is_resource_exhausted(triton_server: Server, pb: Any) -> None:
    with grpc.insecure_channel(target(triton_server)) as channel:
        oip = Stubs(channel, pb)
        big = raw_request(pb, "tensors", [("big", "UINT8", [2**21], bytes(2**21))])
        assert big.ByteSize() > MAX_REQUEST_SIZE
        error = fails(lambda: oip.ModelInfer(big))
        assert error.code() == StatusCode.RESOURCE_EXHAUSTED
        good_call(oip, pb)


def test_a_full_queue_is_unavailable(oip: Stubs, pb: Any, events: EventLog, gates: Gates) -> None:
    # gated: predict_concurrency 1 and one waiting place.
    tag = uuid.uuid4().hex
    gate = gates.new()
    holder = oip.ModelInfer.future(infer_request(pb, "gated", tag=tag + "-holder", gate=gate))
    wait_for(events, tag + "-holder", "predict-start")
    waiter = oip.ModelInfer.future(infer_request(pb, "gated", tag=tag + "-waiter"))
    wait_for(events, tag + "-waiter", "preprocess")
    error = fails(lambda: oip.ModelInfer(infer_request(pb, "gated", tag=tag + "-third")))
    assert error.code() == StatusCode.UNAVAILABLE
    assert "model 'gated' queue is full" in error.details()
    gates.open(gate)
    assert holder.result(timeout=PATIENCE) is not None
    assert waiter.result(timeout=PATIENCE) is not None
    good_call(oip, pb)


def wait_for(events: EventLog, tag: str, event: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while event not in events.names(tag):
        assert time.monotonic() < deadline, f"{event!r} never recorded for {tag}"
        time.sleep(0.01)


def test_an_oversize_response_is_resource_exhausted(triton_server: Server, pb: Any) -> None:
    # tensors answers with its input and a description of it: a request just under the limit
    # gets a response just over it.
    size = MAX_REQUEST_SIZE - 64
    request = raw_request(pb, "tensors", [("big", "UINT8", [size], bytes(size))])
    while request.ByteSize() < MAX_REQUEST_SIZE - 8:
        size += 1
        request = raw_request(pb, "tensors", [("big", "UINT8", [size], bytes(size))])
    assert request.ByteSize() <= MAX_REQUEST_SIZE
    with grpc.insecure_channel(
        target(triton_server), options=[("grpc.max_receive_message_length", 8 * MAX_REQUEST_SIZE)]
    ) as channel:
        oip = Stubs(channel, pb)
        error = fails(lambda: oip.ModelInfer(request))
        assert error.code() == StatusCode.RESOURCE_EXHAUSTED, error.details()
        good_call(oip, pb)


@pytest.mark.parametrize(
    "method",
    [
        "/inference.GRPCInferenceService/ModelInfer",
        "/org.pytorch.serve.grpc.inference.InferenceAPIsService/Predictions",
    ],
)
def test_a_message_that_does_not_parse_is_invalid(
    models_server: Server, oip: Stubs, pb: Any, method: str
) -> None:
    with grpc.insecure_channel(target(models_server)) as channel:
        garbage = channel.unary_unary(method)  # bytes as they are
        error = fails(lambda: garbage(b"\x0a\xff\xff\xff", timeout=PATIENCE))
    assert error.code() == StatusCode.INVALID_ARGUMENT
    assert "does not parse" in error.details()
    good_call(oip, pb)


def test_a_streamed_message_that_does_not_parse_ends_the_stream_after_the_answers_before_it(
    models_server: Server, oip: Stubs, pb: Any
) -> None:
    good = infer_request(pb, "tensors", x=("INT32", [2], [1, 2])).SerializeToString()
    with grpc.insecure_channel(target(models_server)) as channel:
        stream = channel.stream_stream("/inference.GRPCInferenceService/ModelStreamInfer")
        answers = []
        with pytest.raises(grpc.RpcError) as caught:
            for raw in stream(iter([good, b"\x0a\xff\xff\xff"]), timeout=PATIENCE):
                answers.append(pb.ModelInferResponse.FromString(raw))
    assert [outputs(a)["x"] for a in answers] == [[1, 2]]
    assert caught.value.code() == StatusCode.INVALID_ARGUMENT
    assert "does not parse" in caught.value.details()
    good_call(oip, pb)


# -- the one mapping: every status, whichever server and way serves the call -----------------


def test_status_of_gives_each_kind_of_error_its_status(caplog: pytest.LogCaptureFixture) -> None:
    import asyncio

    from podium.errors import NotFound, QueueFull
    from podium.server.grpc._errors import status_of, unhandled_status
    from podium.server.grpc.bridge import Aborted

    assert status_of(NotFound("model 'x' is not known")) == (
        StatusCode.NOT_FOUND,
        "model 'x' is not known",
    )
    assert status_of(QueueFull("full"))[0] == StatusCode.UNAVAILABLE
    assert status_of(Aborted(StatusCode.FAILED_PRECONDITION, "as asked")) == (
        StatusCode.FAILED_PRECONDITION,
        "as asked",
    )
    assert status_of(asyncio.CancelledError()) == (StatusCode.CANCELLED, "the call was cancelled")
    assert caplog.records == []  # none of those is a bug
    # A bug: logged with its traceback; INTERNAL where a handler caught it, UNKNOWN (grpc's own
    # answer) where it escaped the handler. A Podium error is the same either way.
    bug = RuntimeError("a bug")
    assert status_of(bug, "/svc/Method") == (
        StatusCode.INTERNAL,
        "internal error: RuntimeError: a bug",
    )
    assert unhandled_status(bug) == (StatusCode.UNKNOWN, "Exception calling application: a bug")
    assert [r.exc_info is not None for r in caplog.records] == [True, True]
    assert "/svc/Method" in caplog.records[0].getMessage()
    assert unhandled_status(NotFound("gone")) == status_of(NotFound("gone"))
