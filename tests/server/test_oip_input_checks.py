"""No model sees an OIP request the protocol or its declaration refuses (issue 12, item 5), end
to end over REST JSON and gRPC typed contents, the two ways a model that takes the request
itself (``examples/echo``, ``identity``) used to receive, and echo back as an invalid answer,
datatype ``INT322``, shapes that disagree with the data, ``[2**62]`` shapes and ``{"a": 1}`` as
data. Each is a 400 / ``INVALID_ARGUMENT`` naming the input; a model that declares its inputs
(``model_metadata``) also gets a 400 for a missing, extra, mistyped or misshapen input, where a
missing one used to be the model's own ``KeyError`` (500)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as tgrpc
from conftest import EXAMPLES, TEST_MODELS, Server, run_server
from e2e_helpers import PATIENCE
from grpc_helpers import Stubs, podium_messages, target


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with run_server(TEST_MODELS / "triton", EXAMPLES / "echo") as running:
        yield running


def one(name: str = "INPUT0", datatype: str = "FP32", shape: Any = None, data: Any = None):
    return {
        "inputs": [
            {
                "name": name,
                "datatype": datatype,
                "shape": [2] if shape is None else shape,
                "data": [1.0, 2.0] if data is None else data,
            }
        ]
    }


#: What the protocol refuses, whatever the model: (request, words of the answer).
PROTOCOL = {
    "datatype INT322": (one(datatype="INT322"), "unknown datatype 'INT322'"),
    "shape [2] with 3 elements": (
        one(data=[1.0, 2.0, 3.0]),
        "has shape [2] (2 elements) but 3 data elements",
    ),
    "shape [2**62]": (one(shape=[2**62]), "larger than any tensor can be"),
    'data {"a": 1}': (one(data={"a": 1}), "has a JSON object as data"),
    "strings as FP32 data": (one(data=["x", "y"]), "must hold numbers"),
    "negative dimension": (one(shape=[-2]), "a shape must be a list of non-negative integers"),
    "nested ragged data": (one(shape=[2, 2], data=[[1.0], [2.0, 3.0]]), "ragged data"),
    "1e39 as FP32": (one(shape=[1], data=[1e39]), "outside its range"),
}

#: What identity's declaration (INPUT0 FP32 [-1]) refuses besides.
DECLARED = {
    "missing declared input (INPUT9 sent)": (
        one(name="INPUT9"),
        "model 'identity' has no input 'INPUT9'; it declares INPUT0 (FP32 [-1])",
    ),
    "wrong datatype (INT32)": (
        one(datatype="INT32", data=[1, 2]),
        "input 'INPUT0' has datatype INT32, but model 'identity' declares it FP32",
    ),
    "wrong rank ([1, 2])": (
        one(shape=[1, 2]),
        "input 'INPUT0' has shape [1, 2], but model 'identity' declares [-1] (-1: any size)",
    ),
    "no inputs": ({"inputs": []}, "model 'identity' needs input INPUT0 (FP32 [-1]), missing"),
}


@pytest.mark.parametrize("case", sorted(PROTOCOL))
def test_rest_json_the_protocol_refuses(server: Server, case: str) -> None:
    body, words = PROTOCOL[case]
    for model in ("identity", "echo"):
        r = httpx.post(f"{server.url}/v2/models/{model}/infer", json=body, timeout=PATIENCE)
        assert r.status_code == 400, (model, r.text)
        assert words in r.json()["error"] and "'INPUT0'" in r.json()["error"]


@pytest.mark.parametrize("case", sorted(DECLARED))
def test_rest_json_the_declaration_refuses(server: Server, case: str) -> None:
    body, words = DECLARED[case]
    r = httpx.post(f"{server.url}/v2/models/identity/infer", json=body, timeout=PATIENCE)
    assert r.status_code == 400 and words in r.json()["error"], r.text
    # The undeclared echo takes any input that the protocol allows.
    if body["inputs"]:
        r = httpx.post(f"{server.url}/v2/models/echo/infer", json=body, timeout=PATIENCE)
        assert r.status_code == 200, r.text
        assert r.json()["outputs"][0]["data"] == body["inputs"][0]["data"]


def test_a_missing_input_of_a_decoding_model_is_400_not_its_key_error(server: Server) -> None:
    body = {"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": [1] * 16}]}
    r = httpx.post(f"{server.url}/v2/models/simple/infer", json=body, timeout=PATIENCE)
    assert r.status_code == 400, r.text
    assert r.json()["error"] == (
        "model 'simple' needs input INPUT1 (INT32 [-1, 16]), missing from the request"
    )
    body["inputs"][0]["shape"] = [9, 16]
    body["inputs"][0]["data"] = [1] * 144
    body["inputs"].append({**body["inputs"][0], "name": "INPUT1"})
    r = httpx.post(f"{server.url}/v2/models/simple/infer", json=body, timeout=PATIENCE)
    assert r.status_code == 400 and "at most 8 (its max_batch_size)" in r.json()["error"]


def typed(stubs_pb: Any, model: str, name: str, datatype: str, shape: list[int], values: list):
    request = stubs_pb.ModelInferRequest(model_name=model)
    tensor = request.inputs.add(name=name, datatype=datatype, shape=shape)
    field = "int_contents" if datatype == "INT32" else "fp32_contents"
    getattr(tensor.contents, field).extend(values)
    return request


GRPC = [
    # (model, name, datatype, shape, values, words)
    ("identity", "INPUT0", "INT322", [2], [1.0, 2.0], "INPUT0"),
    ("echo", "INPUT0", "INT322", [2], [1.0, 2.0], "INPUT0"),
    ("identity", "INPUT0", "FP32", [2], [1.0, 2.0, 3.0], "has shape [2] (2 elements) but 3 data"),
    ("echo", "INPUT0", "FP32", [2], [1.0, 2.0, 3.0], "has shape [2] (2 elements) but 3 data"),
    ("identity", "INPUT0", "FP32", [2**62], [1.0, 2.0], "larger than any tensor can be"),
    ("echo", "INPUT0", "FP32", [2**62], [1.0, 2.0], "larger than any tensor can be"),
    ("identity", "INPUT9", "FP32", [2], [1.0, 2.0], "model 'identity' has no input 'INPUT9'"),
    ("identity", "INPUT0", "FP32", [1, 2], [1.0, 2.0], "declares [-1] (-1: any size)"),
    ("identity", "INPUT0", "INT32", [2], [1, 2], "declares it FP32"),
    ("simple", "INPUT0", "INT32", [1, 16], [1] * 16, "needs input INPUT1 (INT32 [-1, 16])"),
]


def test_grpc_typed_contents_are_checked_as_rest_json(server: Server) -> None:
    pb = podium_messages()
    with grpc.insecure_channel(target(server)) as channel:
        stubs = Stubs(channel, pb)
        for model, name, datatype, shape, values, words in GRPC:
            with pytest.raises(grpc.RpcError) as caught:
                stubs.ModelInfer(typed(pb, model, name, datatype, shape, values), timeout=PATIENCE)
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (model, shape)
            assert words in caught.value.details(), caught.value.details()
        fine = stubs.ModelInfer(typed(pb, "identity", "INPUT0", "FP32", [2], [1.5, 2.5]))
        assert list(fine.outputs[0].contents.fp32_contents) == [1.5, 2.5]


def test_tritonclient_still_gets_its_answers(server: Server) -> None:
    client = tgrpc.InferenceServerClient(target(server))
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = tgrpc.InferInput(name, [1, 16], "INT32")
        tensor.set_data_from_numpy(np.arange(16, dtype=np.int32).reshape(1, 16))
        inputs.append(tensor)
    result = client.infer("simple", inputs)
    assert result.as_numpy("OUTPUT0").tolist() == [list(range(0, 32, 2))]
    x = tgrpc.InferInput("INPUT0", [3], "FP32")
    x.set_data_from_numpy(np.array([1, 2, 3], dtype=np.float32))
    assert client.infer("identity", [x]).as_numpy("OUTPUT0").tolist() == [1, 2, 3]


# -- Triton's generate form: JSON numbers take the declared datatype ---------------------------


def test_generate_numbers_take_the_declared_datatype(server: Server) -> None:
    """Triton converts ``{"INPUT0": [1.5, 2.5]}`` to its config's FP32; without a declaration
    the numbers would be FP64 and the declared-input check would refuse them (the conformance
    harness's scenario 12)."""
    for value in ([1.5, 2.5], [1, 2]):
        r = httpx.post(
            f"{server.url}/v2/models/identity/generate", json={"INPUT0": value}, timeout=PATIENCE
        )
        assert r.status_code == 200, r.text
        assert r.json()["OUTPUT0"] == [float(v) for v in value]


def test_generate_still_refuses_what_the_declaration_refuses(server: Server) -> None:
    url = f"{server.url}/v2/models/identity/generate"
    nested = httpx.post(url, json={"INPUT0": [[1.5, 2.5]]}, timeout=PATIENCE)  # rank 2, not 1
    assert nested.status_code == 400 and "INPUT0" in nested.json()["error"]
    text = httpx.post(url, json={"INPUT0": ["a"]}, timeout=PATIENCE)  # BYTES, not FP32
    assert text.status_code == 400 and "declares it FP32" in text.json()["error"]
