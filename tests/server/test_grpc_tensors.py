"""OIP protobuf messages to Podium's neutral types and back, without a server."""

from __future__ import annotations

import json

import numpy as np
import pytest

from podium.errors import InvalidTensor, UnsupportedRepresentation
from podium.server.grpc._tensors import (
    ModelInferRequest,
    ModelInferResponse,
    fill_parameters,
    parameters_of,
    to_message,
    to_request,
)
from podium.types import InferenceResponse, ResponseOutput


def test_parameters_of_every_kind_round_trip() -> None:
    values = {
        "flag": True,
        "count": -(2**63),
        "big": 2**64 - 1,
        "ratio": 0.25,
        "name": "é",
    }
    message = ModelInferResponse()
    fill_parameters(message.parameters, values)
    kinds = {k: v.WhichOneof("parameter_choice") for k, v in message.parameters.items()}
    assert kinds == {
        "flag": "bool_param",
        "count": "int64_param",
        "big": "uint64_param",
        "ratio": "double_param",
        "name": "string_param",
    }
    assert parameters_of(message.parameters) == values
    assert parameters_of(ModelInferResponse().parameters) is None


def test_parameters_no_kind_can_hold_travel_as_json_and_none_is_left_out() -> None:
    message = ModelInferResponse()
    fill_parameters(
        message.parameters,
        {"nested": {"a": [1, 2]}, "gone": None, "np": np.int32(4), "huge": 2**70},
    )
    assert json.loads(message.parameters["nested"].string_param) == {"a": [1, 2]}
    assert "gone" not in message.parameters
    assert message.parameters["np"].int64_param == 4
    assert message.parameters["huge"].string_param == str(2**70)


def test_typed_request_becomes_an_inference_request() -> None:
    message = ModelInferRequest(model_name="m", id="7")
    tensor = message.inputs.add(name="x", datatype="UINT16", shape=[2, 1])
    tensor.contents.uint_contents.extend([1, 65535])
    tensor.parameters["unit"].string_param = "cm"
    message.outputs.add(name="y")
    request = to_request(message)
    assert request.id == "7"
    (inp,) = request.inputs
    assert (inp.name, inp.datatype, inp.shape, inp.data) == ("x", "UINT16", [2, 1], [1, 65535])
    assert inp.parameters == {"unit": "cm"}
    assert [o.name for o in request.outputs or []] == ["y"]


def test_raw_request_decodes_through_the_codecs() -> None:
    message = ModelInferRequest(model_name="m")
    message.inputs.add(name="h", datatype="FP16", shape=[2])
    message.raw_input_contents.append(np.array([1.5, -2], dtype="<f2").tobytes())
    (inp,) = to_request(message).inputs
    assert isinstance(inp.data, np.ndarray) and inp.data.dtype == np.float16
    assert inp.data.tolist() == [1.5, -2.0]


def test_missing_contents_are_left_for_the_codecs_to_name() -> None:
    message = ModelInferRequest(model_name="m")
    message.inputs.add(name="x", datatype="INT32", shape=[1])
    assert to_request(message).inputs[0].data is None  # codecs: "input 'x' has no data"


@pytest.mark.parametrize("datatype", ["FP16", "BF16"])
def test_typed_half_floats_are_refused(datatype: str) -> None:
    message = ModelInferRequest(model_name="m")
    message.inputs.add(name="h", datatype=datatype, shape=[1]).contents.fp32_contents.append(1)
    with pytest.raises(InvalidTensor, match=f"input 'h' has datatype {datatype}"):
        to_request(message)


def response(*outputs: ResponseOutput) -> InferenceResponse:
    return InferenceResponse(outputs=list(outputs), model_name="m", model_version="2", id="r")


def test_typed_response() -> None:
    message = to_message(
        response(
            ResponseOutput(name="a", shape=[2, 2], datatype="INT8", data=[[1, -2], [3, 4]]),
            ResponseOutput(name="s", shape=[2], datatype="BYTES", data=["é", b"\x00"]),
            ResponseOutput(
                name="n", shape=[2], datatype="FP32", data=np.array([0.5, 1], dtype=np.float32)
            ),
        ),
        raw=False,
    )
    assert (message.model_name, message.model_version, message.id) == ("m", "2", "r")
    assert not message.raw_output_contents
    a, s, n = message.outputs
    assert list(a.shape) == [2, 2] and list(a.contents.int_contents) == [1, -2, 3, 4]
    assert list(s.contents.bytes_contents) == ["é".encode(), b"\x00"]
    assert list(n.contents.fp32_contents) == [0.5, 1.0]


def test_a_half_float_output_makes_the_whole_response_raw() -> None:
    message = to_message(
        response(
            ResponseOutput(name="i", shape=[1], datatype="INT32", data=[5]),
            ResponseOutput(
                name="h", shape=[1], datatype="FP16", data=np.array([1.5], dtype=np.float16)
            ),
        ),
        raw=False,
    )
    assert [o.HasField("contents") for o in message.outputs] == [False, False]
    assert message.raw_output_contents[0] == np.array([5], dtype="<i4").tobytes()
    assert message.raw_output_contents[1] == np.array([1.5], dtype="<f2").tobytes()


def test_typed_output_that_does_not_fit_its_field_names_it() -> None:
    with pytest.raises(UnsupportedRepresentation, match="output 'big' of datatype INT32"):
        to_message(
            response(ResponseOutput(name="big", shape=[1], datatype="INT32", data=[2**40])),
            raw=False,
        )


def test_ragged_typed_output_is_refused_naming_it_not_flattened() -> None:
    with pytest.raises(UnsupportedRepresentation, match="output 'r' has ragged data"):
        to_message(
            response(ResponseOutput(name="r", shape=[2, 2], datatype="INT32", data=[[1, 2], [3]])),
            raw=False,
        )
