"""The Open Inference Protocol over gRPC, end to end: tritonclient.grpc (raw tensor contents) and
a plain client with typed contents, against a real ``podium serve``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import grpc
import ml_dtypes
import numpy as np
import pytest
import tritonclient.grpc as triton
from conftest import Server, run_server
from e2e_helpers import SERVE_MODELS
from grpc_helpers import Stubs, infer_request, info, outputs, target

from podium.config import ServerConfig

pytest_plugins = ["e2e_fixtures", "grpc_fixtures"]


@pytest.fixture(scope="module")
def echo_client(examples_server: Server) -> triton.InferenceServerClient:
    return triton.InferenceServerClient(target(examples_server))


@pytest.fixture(scope="module")
def client(models_server: Server) -> triton.InferenceServerClient:
    return triton.InferenceServerClient(target(models_server))


def tensor(name: str, datatype: str, array: np.ndarray) -> triton.InferInput:
    inp = triton.InferInput(name, list(array.shape), datatype)
    inp.set_data_from_numpy(array)
    return inp


EVERY_DATATYPE: list[tuple[str, np.ndarray]] = [
    ("BOOL", np.array([[True, False, True]])),
    ("UINT8", np.array([0, 255], dtype=np.uint8)),
    ("UINT16", np.array([0, 65535], dtype=np.uint16)),
    ("UINT32", np.array([0, 2**32 - 1], dtype=np.uint32)),
    ("UINT64", np.array([0, 2**64 - 1], dtype=np.uint64)),
    ("INT8", np.array([-128, 127], dtype=np.int8)),
    ("INT16", np.array([-(2**15), 2**15 - 1], dtype=np.int16)),
    ("INT32", np.array([[-(2**31)], [2**31 - 1]], dtype=np.int32)),
    ("INT64", np.array([-(2**63), 2**63 - 1], dtype=np.int64)),
    ("FP16", np.array([1.5, -0.25, 65504], dtype=np.float16)),
    ("FP32", np.array([[1.5, -2.25], [3.0, 1e-3]], dtype=np.float32)),
    ("FP64", np.array([1e300, -1.5], dtype=np.float64)),
    ("BF16", np.array([1.0, -2.5, 3.140625], dtype=ml_dtypes.bfloat16)),
    ("BYTES", np.array([b"ab", b"", "\x00é".encode()], dtype=np.object_)),
]


# -- health and metadata --------------------------------------------------------------------------


def test_health_with_tritonclient(echo_client: triton.InferenceServerClient) -> None:
    assert echo_client.is_server_live()
    assert echo_client.is_server_ready()
    assert echo_client.is_model_ready("echo")


def test_server_metadata(echo_client: triton.InferenceServerClient) -> None:
    meta = echo_client.get_server_metadata(as_json=True)
    assert meta["name"] == "podium"
    assert {"model_repository", "infer_stream"} <= set(meta["extensions"])


def test_model_metadata(client: triton.InferenceServerClient, oip: Stubs, pb: Any) -> None:
    meta = client.get_model_metadata("versioned", as_json=True)
    assert meta["name"] == "versioned"
    assert meta["versions"] == ["1", "2", "10"]
    assert meta["platform"] == "e2e-test"
    assert meta["inputs"] == [{"name": "x", "datatype": "FP64", "shape": ["-1"]}]
    assert meta["outputs"] == [{"name": "version", "datatype": "BYTES", "shape": ["1"]}]
    # MLServer's extension field carries the version's state.
    full = oip.ModelMetadata(pb.ModelMetadataRequest(name="versioned", version="2"))
    assert full.parameters["state"].string_param == "ready"


def test_an_unversioned_model_is_version_1(client: triton.InferenceServerClient) -> None:
    # Triton's default version: clients that pin model_version="1" reach an unversioned model.
    assert client.get_model_metadata("tensors", as_json=True)["versions"] == ["1"]
    assert client.get_model_metadata("tensors", "1", as_json=True)["versions"] == ["1"]
    assert client.is_model_ready("tensors", "1")
    x = tensor("x", "INT32", np.array([5, 6], dtype=np.int32))
    assert client.infer("tensors", [x], model_version="1").as_numpy("x").tolist() == [5, 6]
    with pytest.raises(triton.InferenceServerException) as caught:
        client.infer("tensors", [x], model_version="2")
    assert "version 2 is not found (versions: 1 (unversioned))" in caught.value.message()


def test_bytes_outputs_travel_as_bytes(client: triton.InferenceServerClient) -> None:
    # gRPC carries BYTES as bytes (raw for tritonclient), UTF-8 or not: no text conversion.
    for kind, expected in (("bytes-tensor", [b"2", b"3"]), ("badbytes-tensor", [b"\xff\x00"])):
        request = tensor("kind", "BYTES", np.array([kind.encode()], dtype=np.object_))
        assert client.infer("emit", [request]).as_numpy("y").tolist() == expected


def test_repository_index_lists_every_version_with_its_state(
    client: triton.InferenceServerClient, failing_server: Server
) -> None:
    index = client.get_model_repository_index(as_json=True)["models"]
    versions = [(m["name"], m.get("version", "")) for m in index]
    assert ("versioned", "1") in versions and ("versioned", "10") in versions
    assert ("echo", "1") not in versions and ("tensors", "1") in versions  # unversioned: "1"
    assert all(m["state"] == "READY" for m in index)

    failing = triton.InferenceServerClient(target(failing_server))
    by_name = {m["name"]: m for m in failing.get_model_repository_index(as_json=True)["models"]}
    assert by_name["fine"]["state"] == "READY"
    assert by_name["failing"]["state"] == "UNAVAILABLE"
    assert "the weights file is missing (on purpose)" in by_name["failing"]["reason"]


# -- inference with tritonclient (raw contents) ------------------------------------------------


def test_echo_round_trips_every_datatype(echo_client: triton.InferenceServerClient) -> None:
    inputs = [tensor(f"in_{dt}", dt, array) for dt, array in EVERY_DATATYPE]
    result = echo_client.infer("echo", inputs, request_id="req-7")
    response = result.get_response()
    assert response.id == "req-7"
    assert response.model_name == "echo"
    assert len(response.raw_output_contents) == len(EVERY_DATATYPE)
    for datatype, array in EVERY_DATATYPE:
        got = result.as_numpy(f"in_{datatype}")
        assert got.dtype == array.dtype, datatype
        assert result.get_output(f"in_{datatype}").datatype == datatype
        assert got.shape == array.shape, datatype
        assert got.tolist() == array.tolist(), datatype


def test_echo_passes_any_bytes_through(echo_client: triton.InferenceServerClient) -> None:
    blobs = np.array([b"\xff\xfe", b"\x00"], dtype=np.object_)
    result = echo_client.infer("echo", [tensor("blob", "BYTES", blobs)])
    assert result.as_numpy("blob").tolist() == [b"\xff\xfe", b"\x00"]


def test_tensors_model_receives_every_datatype_decoded(
    client: triton.InferenceServerClient,
) -> None:
    inputs = [tensor(f"in_{dt}", dt, array) for dt, array in EVERY_DATATYPE]
    result = client.infer("tensors", inputs)
    kinds = [k.decode() for k in result.as_numpy("kinds").tolist()]
    expected = []
    for datatype, array in EVERY_DATATYPE:
        dtype = {"BF16": "float32", "BYTES": "list[bytes]"}.get(datatype, str(array.dtype))
        shape = [array.size] if datatype == "BYTES" else list(array.shape)
        expected.append(f"in_{datatype}:{dtype}:{shape}".replace("[3]", "3", datatype == "BYTES"))
    assert kinds == expected
    assert result.as_numpy("in_FP16").tolist() == [1.5, -0.25, 65504]
    assert result.as_numpy("in_BYTES").tolist() == [b"ab", b"", "\x00é".encode()]
    # BF16 decodes to float32 holding exactly the values sent, and comes back as FP32.
    assert result.as_numpy("in_BF16").dtype == np.float32
    assert result.as_numpy("in_BF16").tolist() == [1.0, -2.5, 3.140625]


def test_requested_outputs_are_honoured(client: triton.InferenceServerClient) -> None:
    result = client.infer(
        "emit",
        [tensor("kind", "BYTES", np.array([b"dict"], dtype=np.object_))],
        outputs=[triton.InferRequestedOutput("s"), triton.InferRequestedOutput("i")],
    )
    assert [o.name for o in result.get_response().outputs] == ["s", "i"]
    assert result.as_numpy("s").tolist() == [b"hi"]
    assert result.as_numpy("i").tolist() == [3]


def test_a_version_is_addressed(client: triton.InferenceServerClient) -> None:
    x = tensor("x", "FP64", np.array([1.0]))
    for version in ("1", "10"):
        result = client.infer("versioned", [x], model_version=version)
        assert result.get_response().model_version == version
        assert result.as_numpy("version").tolist() == [version.encode()]


def test_a_streaming_model_called_unary_is_gathered(client: triton.InferenceServerClient) -> None:
    inputs = [
        tensor("n", "INT64", np.array([3])),
        tensor("tag", "BYTES", np.array([b"unary-gathered"], dtype=np.object_)),
    ]
    result = client.infer("streamer", inputs)
    assert result.as_numpy("output").tolist() == [b"w0 ", b"w1 ", b"w2 "]


def test_request_metadata_reaches_the_model_as_headers(
    client: triton.InferenceServerClient,
) -> None:
    result = client.infer(
        "headers",
        [tensor("x", "INT32", np.array([1, 2], dtype=np.int32))],
        headers={"x-trace": "abc-123", "authorization": "Bearer t"},
    )
    seen = json.loads(result.as_numpy("info")[0])
    assert seen["headers"]["x-trace"] == "abc-123"
    assert seen["headers"]["authorization"] == "Bearer t"
    assert seen["method"] == "POST"
    assert seen["path"] == "/inference.GRPCInferenceService/ModelInfer"
    assert seen["body"] == ""  # the message itself became the inputs
    assert seen["client"][0] == "127.0.0.1"
    assert seen["disconnected"] is False
    assert seen["inputs"] == ["x"]


# -- typed contents ---------------------------------------------------------------------------


TYPED = [
    ("BOOL", [True, False]),
    ("INT8", [-128, 127]),
    ("INT16", [-(2**15), 7]),
    ("INT32", [-(2**31), 2**31 - 1]),
    ("INT64", [-(2**63), 2**63 - 1]),
    ("UINT8", [0, 255]),
    ("UINT16", [0, 65535]),
    ("UINT32", [0, 2**32 - 1]),
    ("UINT64", [0, 2**64 - 1]),
    ("FP32", [1.5, -0.25]),
    ("FP64", [1e300, -2.5]),
    ("BYTES", [b"x", "\x00é".encode()]),
]


def test_typed_contents_of_every_field_in_and_out(oip: Stubs, pb: Any) -> None:
    request = infer_request(pb, "tensors", **{f"in_{dt}": (dt, [2], v) for dt, v in TYPED})
    response = oip.ModelInfer(request)
    assert not response.raw_output_contents  # typed in, typed out
    got = outputs(response)
    for datatype, values in TYPED:
        assert got[f"in_{datatype}"] == values, datatype
    by_name = {o.name: o for o in response.outputs}
    assert by_name["in_INT8"].datatype == "INT8"
    assert by_name["in_UINT64"].datatype == "UINT64"


def test_typed_text_input_reaches_the_model_as_str(oip: Stubs, pb: Any) -> None:
    described = info(oip.ModelInfer(infer_request(pb, "probe", word="héllo")))
    assert described == {"dict": {"word": {"list": [{"str": "héllo"}]}}}


def test_parameters_of_every_kind_reach_the_model(oip: Stubs, pb: Any) -> None:
    request = infer_request(pb, "probe-oip", x=("INT32", [1], [5]))
    request.id = "p-1"
    params = request.parameters
    params["flag"].bool_param = True
    params["count"].int64_param = -3
    params["name"].string_param = "abc"
    params["ratio"].double_param = 0.5
    params["big"].uint64_param = 2**64 - 1
    request.inputs[0].parameters["unit"].string_param = "cm"
    response = oip.ModelInfer(request)
    assert response.id == "p-1"
    seen = info(response)["request"]
    assert seen["parameters"] == {
        "flag": True,
        "count": -3,
        "name": "abc",
        "ratio": 0.5,
        "big": 2**64 - 1,
    }
    assert seen["inputs"][0]["parameters"] == {"unit": "cm"}
    assert seen["id"] == "p-1"


def test_model_response_parameters_come_back(oip: Stubs, pb: Any) -> None:
    response = oip.ModelInfer(infer_request(pb, "emit", kind="response"))
    assert response.parameters["from"].string_param == "model"
    assert outputs(response) == {"a": [7], "b": [1.5, 2.5]}


def test_raw_request_gets_raw_response_from_a_plain_client(oip: Stubs, pb: Any) -> None:
    request = pb.ModelInferRequest(model_name="tensors")
    request.inputs.add(name="v", datatype="INT16", shape=[3])
    request.raw_input_contents.append(np.array([1, -2, 3], dtype="<i2").tobytes())
    response = oip.ModelInfer(request)
    assert len(response.raw_output_contents) == 2
    assert outputs(response)["v"] == [1, -2, 3]
    assert outputs(response)["kinds"] == [b"v:int16:[3]"]


@pytest.fixture(scope="module")
def raw_server() -> Iterator[Server]:
    """``--grpc-output-contents raw``: every answer raw, as Triton's."""
    with run_server(SERVE_MODELS / "tensors", args=("--grpc-output-contents", "raw")) as server:
        yield server


def explicit_int_request(pb: Any) -> Any:
    """The request of Triton's grpc_explicit_int_content_client.py: typed int_contents."""
    request = pb.ModelInferRequest(model_name="tensors", model_version="")
    for name, values in (("INPUT0", list(range(16))), ("INPUT1", [1] * 16)):
        tensor = request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        tensor.contents.int_contents[:] = values
    request.outputs.add(name="INPUT0")
    request.outputs.add(name="INPUT1")
    return request


def test_typed_requests_get_typed_answers_by_default(oip: Stubs, pb: Any) -> None:
    # MLServer's and KServe's rule (the KServe SDK reads typed answers as `.data`).
    response = oip.ModelInfer(explicit_int_request(pb))
    assert not response.raw_output_contents
    assert list(response.outputs[0].contents.int_contents) == list(range(16))


def test_with_raw_output_contents_typed_requests_get_raw_answers_as_from_triton(
    raw_server: Server, pb: Any
) -> None:
    # What Triton's explicit-content example clients read: raw_output_contents[index].
    with grpc.insecure_channel(target(raw_server)) as channel:
        response = Stubs(channel, pb).ModelInfer(explicit_int_request(pb))
    assert [o.name for o in response.outputs] == ["INPUT0", "INPUT1"]
    assert not any(o.HasField("contents") for o in response.outputs)
    results = [
        np.frombuffer(raw, dtype=np.int32).reshape(list(out.shape))
        for out, raw in zip(response.outputs, response.raw_output_contents, strict=True)
    ]
    assert results[0][0].tolist() == list(range(16)) and results[1][0].tolist() == [1] * 16
    # and tritonclient, as ever
    client = triton.InferenceServerClient(target(raw_server))
    x = tensor("x", "INT32", np.array([5, 6], dtype=np.int32))
    assert client.infer("tensors", [x]).as_numpy("x").tolist() == [5, 6]


def test_the_output_contents_setting_is_validated() -> None:
    assert ServerConfig().protocols.grpc_output_contents == "request"
    assert ServerConfig(grpc_output_contents="raw").protocols.grpc_output_contents == "raw"
    with pytest.raises(ValueError, match="grpc-output-contents must be 'request' or 'raw'"):
        ServerConfig(grpc_output_contents="typed")


def test_binary_metadata_reaches_the_model_as_its_bytes(oip: Stubs, pb: Any) -> None:
    response = oip.ModelInfer(
        infer_request(pb, "headers", x=("INT32", [1], [1])),
        metadata=(("x-blob-bin", b"\x00\xff"),),
    )
    assert info(response)["headers"]["x-blob-bin"] == "\x00\xff"  # latin-1, as starlette reads
