"""ModelStreamInfer in both framings: Triton's (tritonclient's start_stream / async_stream_infer,
errors in-band, the stream stays open) and MLServer's (stubs declaring ``stream ModelInferRequest``
→ ``stream ModelInferResponse``, an error ends the stream with its status). Both kinds of
streaming: one request answered by many responses, and many requests answered in order."""

from __future__ import annotations

import queue
import uuid
from types import SimpleNamespace
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as triton
from conftest import Server
from e2e_helpers import PATIENCE
from grpc_helpers import Stubs, infer_request, outputs, target

pytest_plugins = ["e2e_fixtures", "grpc_fixtures"]


def text(name: str, value: str) -> triton.InferInput:
    inp = triton.InferInput(name, [1], "BYTES")
    inp.set_data_from_numpy(np.array([value.encode()], dtype=np.object_))
    return inp


def streamer_inputs(tag: str, n: int, mode: str = "text") -> list[triton.InferInput]:
    return [text("tag", tag), text("n", str(n)), text("mode", mode)]


class TritonStream:
    """tritonclient's bidirectional stream; ``results()`` collects what the callback got."""

    def __init__(self, server: Server) -> None:
        self.client = triton.InferenceServerClient(target(server))
        self._got: queue.Queue[tuple[Any, Any]] = queue.Queue()
        self.client.start_stream(callback=lambda result, error: self._got.put((result, error)))

    def send(self, model: str, inputs: list[triton.InferInput], **kwargs: Any) -> None:
        self.client.async_stream_infer(model, inputs, **kwargs)

    def next(self) -> tuple[Any, Any]:
        return self._got.get(timeout=PATIENCE)

    def close(self) -> None:
        self.client.stop_stream()
        self.client.close()


@pytest.fixture
def stream(triton_server: Server) -> Any:
    opened = TritonStream(triton_server)
    yield opened
    opened.close()


def words(result: Any) -> list[str]:
    """The text items of streamer; ``["i=N"]`` for its JSON-like items (modes json, fail)."""
    found = result.as_numpy("output")
    if found is None:
        return [f"i={result.as_numpy('i').item()}"]
    return [w.decode() for w in found.tolist()]


# -- Triton's framing -------------------------------------------------------------------------


def test_triton_one_request_many_responses(stream: TritonStream) -> None:
    stream.send("streamer", streamer_inputs(uuid.uuid4().hex, 3), request_id="one")
    got = [stream.next() for _ in range(3)]
    assert [error for _, error in got] == [None, None, None]
    assert [words(result) for result, _ in got] == [["w0 "], ["w1 "], ["w2 "]]
    assert {result.get_response().id for result, _ in got} == {"one"}


def test_triton_errors_are_in_band_and_the_stream_stays_open(stream: TritonStream) -> None:
    tag = uuid.uuid4().hex
    stream.send("streamer", streamer_inputs(tag, 2), request_id="1")
    stream.send("nope", [text("x", "y")], request_id="2")
    stream.send("raiser", [text("why", "on purpose")], request_id="3")
    stream.send("streamer", streamer_inputs(tag + "-f", 2, "fail"), request_id="4")
    stream.send("streamer", streamer_inputs(tag + "-ok", 1), request_id="5")
    got = [stream.next() for _ in range(7)]
    kinds = [
        ("error", str(error)) if error is not None else (result.get_response().id, words(result))
        for result, error in got
    ]
    assert kinds[0:2] == [("1", ["w0 "]), ("1", ["w1 "])]
    assert (
        kinds[2][0] == "error" and "Request for unknown model: 'nope' is not found" in kinds[2][1]
    )
    assert kinds[3][0] == "error" and "predict raised ValueError: the model refused" in kinds[3][1]
    assert kinds[4] == ("4", ["i=0"])  # the failing stream's first item
    assert kinds[5][0] == "error" and "the stream failed after item 0" in kinds[5][1]
    assert kinds[6] == ("5", ["w0 "])


def test_triton_empty_final_response(stream: TritonStream) -> None:
    stream.send(
        "streamer",
        streamer_inputs(uuid.uuid4().hex, 2),
        request_id="f",
        enable_empty_final_response=True,
    )
    got = [stream.next()[0].get_response() for _ in range(3)]
    finals = [r.parameters["triton_final_response"].bool_param for r in got]
    assert finals == [False, False, True]
    assert [len(r.outputs) for r in got] == [1, 1, 0]
    assert {r.id for r in got} == {"f"}


def test_triton_every_response_says_whether_it_is_the_last(stream: TritonStream) -> None:
    # Triton's framing marks each response with triton_final_response (C++ clients and
    # perf_analyzer take a response without it for the last): a plain model's one response is
    # final, and no empty response follows it even when asked (as for Triton's non-decoupled
    # models); a generator's items are not, and without asking no empty final follows.
    ints = triton.InferInput("x", [2], "INT64")
    ints.set_data_from_numpy(np.array([4, 5]))
    stream.send("tensors", [ints], request_id="plain", enable_empty_final_response=True)
    stream.send("streamer", streamer_inputs(uuid.uuid4().hex, 2), request_id="gen")
    stream.send("tensors", [ints], request_id="after")
    got = [stream.next() for _ in range(4)]
    assert [error for _, error in got] == [None] * 4
    responses = [result.get_response() for result, _ in got]
    assert [(r.id, r.parameters["triton_final_response"].bool_param) for r in responses] == [
        ("plain", True),
        ("gen", False),
        ("gen", False),
        ("after", True),
    ]
    assert got[0][0].as_numpy("x").tolist() == [4, 5]


def test_triton_an_in_band_error_is_the_requests_last_response(
    triton_server: Server, pb: Any
) -> None:
    with grpc.insecure_channel(target(triton_server)) as channel:
        stubs = Stubs(channel, pb)  # the declared response type: Triton's framing
        requests = [infer_request(pb, "nope", x=1), infer_request(pb, "tensors", x=1)]
        requests[0].id = "gone"
        got = list(stubs.ModelStreamInfer(iter(requests), timeout=PATIENCE))
    assert "Request for unknown model: 'nope' is not found" in got[0].error_message
    failed = got[0].infer_response
    assert (failed.model_name, failed.id) == ("nope", "gone")
    assert failed.parameters["triton_final_response"].bool_param is True
    assert got[1].error_message == "" and outputs(got[1].infer_response)["x"] == [1]


def test_the_default_framing_is_tritons(examples_server: Server) -> None:
    """``podium serve`` without --grpc-stream-format: tritonclient's stream works unchanged
    (under MLServer's framing it reads the model name as the error message)."""
    opened = TritonStream(examples_server)
    try:
        prompt = triton.InferInput("prompt", [1], "BYTES")
        prompt.set_data_from_numpy(np.array([b"two words"], dtype=np.object_))
        opened.send("text-stream", [prompt], request_id="d", enable_empty_final_response=True)
        got = [opened.next() for _ in range(3)]
    finally:
        opened.close()
    assert [error for _, error in got] == [None] * 3
    items = [result.as_numpy("output") for result, _ in got[:2]]
    assert [item.tolist() for item in items] == [[b"two"], [b" words"]]
    finals = [r.get_response().parameters["triton_final_response"].bool_param for r, _ in got]
    assert finals == [False, False, True]


def test_triton_requests_on_one_stream_run_concurrently(stream: TritonStream) -> None:
    # overlap's preprocess waits until all n requests are inside it, predict until five run at
    # once (a barrier that is never filled times out): this passes only if one stream's requests
    # overlap. Answers still come back in the order of the requests.
    tag = uuid.uuid4().hex
    for i in range(5):
        ints = triton.InferInput("i", [1], "INT64")
        ints.set_data_from_numpy(np.array([i]))
        count = triton.InferInput("n", [1], "INT64")
        count.set_data_from_numpy(np.array([5]))
        stream.send("overlap", [text("tag", tag), ints, count], request_id=str(i))
    got = [stream.next() for _ in range(5)]
    assert [error for _, error in got] == [None] * 5
    assert [result.as_numpy("i").tolist() for result, _ in got] == [[0], [1], [2], [3], [4]]


# -- MLServer's framing -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def ml(models_server: Server, mlserver: SimpleNamespace) -> Any:
    with grpc.insecure_channel(target(models_server)) as channel:
        yield SimpleNamespace(stubs=Stubs(channel, mlserver), pb=mlserver)


def streamer_request(ml: SimpleNamespace, tag: str, n: int, mode: str = "text", **kw: Any) -> Any:
    request = infer_request(ml.pb, "streamer", tag=tag, n=str(n), mode=mode)
    for key, value in kw.items():
        setattr(request, key, value)
    return request


def test_mlserver_unary(ml: SimpleNamespace) -> None:
    response = ml.stubs.ModelInfer(infer_request(ml.pb, "tensors", x=("FP32", [2], [1.5, 2.5])))
    assert type(response).DESCRIPTOR.file.pool is ml.pb.pool  # the MLServer-style client's own
    assert outputs(response) == {"x": [1.5, 2.5], "kinds": [b"x:float32:[2]"]}


def test_mlserver_one_request_many_responses(ml: SimpleNamespace) -> None:
    responses = list(ml.stubs.ModelStreamInfer(iter([streamer_request(ml, "ml-one", 3, id="a")])))
    assert [outputs(r)["output"] for r in responses] == [[b"w0 "], [b"w1 "], [b"w2 "]]
    assert {(r.id, r.model_name) for r in responses} == {("a", "streamer")}


def test_mlserver_many_requests_answered_in_order(ml: SimpleNamespace) -> None:
    requests = [
        streamer_request(ml, "ml-many-1", 2, id="1"),
        infer_request(ml.pb, "tensors", x=("INT64", [1], [7])),
        streamer_request(ml, "ml-many-2", 1, id="3"),
    ]
    responses = list(ml.stubs.ModelStreamInfer(iter(requests)))
    assert [(r.model_name, r.id) for r in responses] == [
        ("streamer", "1"),
        ("streamer", "1"),
        ("tensors", ""),
        ("streamer", "3"),
    ]
    assert outputs(responses[2])["x"] == [7]


def test_mlserver_an_error_ends_the_stream_with_its_status(ml: SimpleNamespace) -> None:
    requests = [
        streamer_request(ml, "ml-err", 1, id="1"),
        infer_request(ml.pb, "nope", x=1),
        streamer_request(ml, "ml-err-never", 1, id="3"),
    ]
    got = []
    with pytest.raises(grpc.RpcError) as caught:
        for response in ml.stubs.ModelStreamInfer(iter(requests)):
            got.append(response.id)
    assert got == ["1"]
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert "Request for unknown model: 'nope' is not found" in caught.value.details()


def test_mlserver_a_failing_generator_ends_the_stream_internal(ml: SimpleNamespace) -> None:
    got = []
    with pytest.raises(grpc.RpcError) as caught:
        for response in ml.stubs.ModelStreamInfer(iter([streamer_request(ml, "ml-f", 3, "fail")])):
            got.append(outputs(response)["i"])
    assert got == [[0]]
    assert caught.value.code() == grpc.StatusCode.INTERNAL
    assert "the stream failed after item 0" in caught.value.details()
