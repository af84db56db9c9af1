"""An MLServer runtime over gRPC: ModelStreamInfer hands a runtime whose predict_stream reads
many requests the whole stream (one predict_stream call answers them all), in both framings;
raw BYTES inputs reach it as text, as MLServer gives them."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as triton
from conftest import TEST_MODELS, Server, run_server
from e2e_helpers import PATIENCE
from grpc_helpers import Stubs, target

pytest_plugins = ["e2e_fixtures", "grpc_fixtures"]

MODEL = TEST_MODELS / "mlserver" / "conversation"


@pytest.fixture(scope="module", params=["mlserver", "triton"])
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    with run_server(MODEL, args=("--grpc-stream-format", request.param)) as running:
        running.framing = request.param  # type: ignore[attr-defined]
        yield running


def text_request(pb: Any, text: str, model: str = "conversation") -> Any:
    request = pb.ModelInferRequest(model_name=model)
    tensor = request.inputs.add(name="text", datatype="BYTES", shape=[1])
    tensor.parameters["content_type"].string_param = "str"
    tensor.contents.bytes_contents.append(text.encode())
    return request


def texts(response: Any) -> list[str]:
    return [v.decode() for v in response.outputs[0].contents.bytes_contents] or [
        response.raw_output_contents[0][4:].decode()
    ]


def test_one_predict_stream_reads_the_whole_stream(
    server: Server, mlserver: SimpleNamespace, pb: SimpleNamespace
) -> None:
    framing = server.framing  # type: ignore[attr-defined]
    messages = mlserver if framing == "mlserver" else pb
    output = mlserver.ModelInferResponse if framing == "mlserver" else pb.ModelStreamInferResponse
    with grpc.insecure_channel(target(server)) as channel:
        stubs = Stubs(channel, messages, stream_output=output)
        requests = [text_request(messages, t) for t in ("a", "b", "c")]
        got = list(stubs.ModelStreamInfer(iter(requests), timeout=PATIENCE))
        if framing == "triton":
            assert [g.error_message for g in got] == ["", "", ""]
            got = [g.infer_response for g in got]
            # No answer is a request's last: the runtime decides when it answers.
            finals = [g.parameters["triton_final_response"].bool_param for g in got]
            assert finals == [False, False, False]
            asking = text_request(messages, "d")
            asking.parameters["triton_enable_empty_final_response"].bool_param = True
            tail = list(stubs.ModelStreamInfer(iter([asking]), timeout=PATIENCE))
            assert [len(t.infer_response.outputs) for t in tail] == [1, 0]
            assert tail[1].infer_response.parameters["triton_final_response"].bool_param
        # One predict_stream read all three: its count goes on across requests.
        assert [texts(g) for g in got] == [["1:a"], ["2:b"], ["3:c"]]

        # The runtime failing mid-stream: MLServer's framing ends the call with the status,
        # Triton's sends the error in-band and ends the stream.
        failing = [text_request(messages, t) for t in ("a", "boom", "never")]
        if framing == "mlserver":
            answers = []
            with pytest.raises(grpc.RpcError) as caught:
                for answer in stubs.ModelStreamInfer(iter(failing), timeout=PATIENCE):
                    answers.append(texts(answer))
            assert answers == [["1:a"]]
            assert caught.value.code() == grpc.StatusCode.INTERNAL
            assert "exploded after 2 requests" in (caught.value.details() or "")
        else:
            answers = list(stubs.ModelStreamInfer(iter(failing), timeout=PATIENCE))
            assert texts(answers[0].infer_response) == ["1:a"]
            assert "exploded after 2 requests" in answers[1].error_message
            assert len(answers) == 2

        # Another model named mid-stream is refused: the stream belongs to the runtime.
        mixed = [text_request(messages, "a"), text_request(messages, "b", model="other")]
        if framing == "mlserver":
            with pytest.raises(grpc.RpcError) as caught:
                list(stubs.ModelStreamInfer(iter(mixed), timeout=PATIENCE))
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "every request of it must name that model" in (caught.value.details() or "")
        else:
            answers = list(stubs.ModelStreamInfer(iter(mixed), timeout=PATIENCE))
            assert "every request of it must name that model" in answers[-1].error_message


def test_raw_bytes_inputs_reach_the_runtime_as_text(server: Server) -> None:
    """tritonclient sends BYTES raw (length-prefixed); the runtime decodes text, not base64."""
    client = triton.InferenceServerClient(target(server))
    try:
        x = triton.InferInput("text", [1], "BYTES")
        x.set_data_from_numpy(np.array([b"caf\xc3\xa9"], dtype=object))
        result = client.infer("conversation", [x], timeout=int(PATIENCE))
        assert result.as_numpy("echo").tolist() == [[b"caf\xc3\xa9"]]  # MLServer's [n, 1]
    finally:
        client.close()
