"""podium.compat.mlserver: the OIP types and every codec, as MLServer's runtimes use them."""

from __future__ import annotations

import base64
import datetime

import numpy as np
import pytest
from pydantic import ValidationError

from podium.compat.mlserver import codecs, types
from podium.compat.mlserver.codecs import (
    Base64Codec,
    CodecError,
    DatetimeCodec,
    NumpyCodec,
    NumpyRequestCodec,
    StringCodec,
    StringRequestCodec,
    decode_args,
)
from podium.compat.mlserver.codecs.base import (
    find_input_codec,
    find_input_codec_by_payload,
    find_input_codec_by_type_hint,
    find_request_codec,
)
from podium.compat.mlserver.codecs.errors import CodecNotFound, InputsNotFound, OutputNotFound
from podium.compat.mlserver.errors import MLServerError


def bytes_input(data: list, content_type: str | None = None) -> types.RequestInput:
    params = {"content_type": content_type} if content_type else None
    return types.RequestInput(
        name="a", shape=[len(data)], datatype="BYTES", data=data, parameters=params
    )


# -- types ----------------------------------------------------------------------------------------


def test_requests_validate_and_dump_without_unset_or_none_fields() -> None:
    req = types.InferenceRequest.model_validate(
        {"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [1, 2]}]}
    )
    assert req.id is None and req.inputs[0].datatype == "FP32"  # enum stored as its value
    assert isinstance(req.inputs[0].data, types.TensorData)
    assert list(req.inputs[0].data) == [1, 2] and len(req.inputs[0].data) == 2
    assert req.inputs[0].data[1] == 2
    assert req.model_dump() == {
        "inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [1, 2]}]
    }
    assert "parameters" in req.model_dump(exclude_unset=False, exclude_none=False)
    assert req.model_dump_json() == (
        '{"inputs":[{"name":"x","shape":[2],"datatype":"FP32","data":[1,2]}]}'
    )


def test_unknown_datatypes_and_missing_fields_are_validation_errors() -> None:
    with pytest.raises(ValidationError, match="datatype"):
        types.RequestInput(name="x", shape=[1], datatype="BF16", data=[1])
    with pytest.raises(ValidationError, match="inputs"):
        types.InferenceRequest.model_validate({"id": "1"})
    with pytest.raises(ValidationError, match="model_name"):
        types.InferenceResponse.model_validate({"outputs": []})


def test_parameters_keep_extra_keys_and_hide_private_ones() -> None:
    params = types.Parameters(content_type="str", custom=3)
    params._decoded_payload = ["x"]
    assert params.custom == 3  # type: ignore[attr-defined]
    assert params.model_dump() == {"content_type": "str", "custom": 3}


def test_metadata_and_repository_types() -> None:
    meta = types.MetadataModelResponse(
        name="m", platform="p", inputs=[types.MetadataTensor(name="a", datatype="INT8", shape=[1])]
    )
    assert meta.model_dump() == {
        "name": "m",
        "platform": "p",
        "inputs": [{"name": "a", "datatype": "INT8", "shape": [1]}],
    }
    index = types.RepositoryIndexResponse([{"name": "m", "state": "READY", "reason": ""}])
    assert [item.state for item in index] == ["READY"] and len(index) == 1


# -- StringCodec ----------------------------------------------------------------------------------


def test_string_codec_round_trip_and_wire_form() -> None:
    out = StringCodec.encode_output("o", ["héllo", "b"])
    assert (out.datatype, out.shape, out.parameters.content_type) == ("BYTES", [2, 1], "str")
    assert list(out.data) == ["héllo".encode(), b"b"]
    assert StringCodec.decode_output(out) == ["héllo", "b"]
    text = StringCodec.encode_input("i", ["a"], use_bytes=False)
    assert list(text.data) == ["a"] and StringCodec.decode_input(text) == ["a"]


def test_the_deprecated_encode_and_decode_warn_and_do_what_they_stand_for(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level("WARNING", logger="mlserver"):
        out = StringCodec.encode("o", ["a"])
        assert out == StringCodec.encode_output("o", ["a"])
        assert StringCodec.decode(bytes_input([b"a"])) == ["a"]
        response = StringRequestCodec.encode("m", ["a"], "1")
        assert response == StringRequestCodec.encode_response("m", ["a"], "1")
        request = types.InferenceRequest(inputs=[bytes_input([b"a"])])
        assert StringRequestCodec.decode(request) == ["a"]
    assert [r.getMessage() for r in caplog.records] == [
        "DEPRECATED! The encode() method is now deprecated. Use encode_output() instead.",
        "DEPRECATED! The decode() method is now deprecated. Use decode_input() instead.",
        "DEPRECATED! The encode() method is now deprecated. Use encode_response() instead.",
        "DEPRECATED! The decode() method is now deprecated. Use decode_request() instead.",
    ]


def test_string_codec_decodes_json_text_single_values_and_odd_elements() -> None:
    assert StringCodec.decode_input(bytes_input(["a", b"b"])) == ["a", "b"]
    single = types.RequestInput(name="a", shape=[1], datatype="BYTES", data="one")
    assert StringCodec.decode_input(single) == ["one"]
    assert StringCodec.decode_input(bytes_input([None, 5])) == [None, ""]  # MLServer's rule
    assert StringCodec.can_encode(["a"]) and not StringCodec.can_encode(["a", b"b"])
    assert not StringCodec.can_encode("a")


def test_string_request_codec_takes_exactly_one_input() -> None:
    req = StringRequestCodec.encode_request(["x", "y"])
    assert req.parameters.content_type == "str" and req.inputs[0].name == "input-1"
    assert StringRequestCodec.decode_request(req) == ["x", "y"]
    res = StringRequestCodec.encode_response("m", ["z"], "3")
    assert (res.model_name, res.model_version, res.outputs[0].name) == ("m", "3", "output-1")
    assert StringRequestCodec.decode_response(res) == ["z"]
    two = types.InferenceRequest(inputs=[bytes_input(["a"]), bytes_input(["b"])])
    with pytest.raises(
        CodecError, match="only supports a single input tensor \\(2 were received\\)"
    ):
        StringRequestCodec.decode_request(two)
    assert isinstance(CodecError("x"), MLServerError) and CodecError("x").status_code == 400


# -- NumpyCodec -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "datatype"),
    [
        ("bool", "BOOL"),
        ("uint8", "UINT8"),
        ("int16", "INT16"),
        ("int64", "INT64"),
        ("float16", "FP16"),
        ("float32", "FP32"),
        ("float64", "FP64"),
    ],
)
def test_numpy_codec_round_trips_every_dtype(dtype: str, datatype: str) -> None:
    array = np.arange(6).reshape(2, 3).astype(dtype)
    out = NumpyCodec.encode_output("o", array)
    assert (out.datatype, out.shape, out.parameters.content_type) == (datatype, [2, 3], "np")
    decoded = NumpyCodec.decode_output(out)
    assert decoded.dtype == np.dtype(dtype) and np.array_equal(decoded, array)


def test_numpy_codec_shapes_nan_and_strings() -> None:
    out = NumpyCodec.encode_output("o", np.array([1.0, np.nan]))
    assert out.shape == [2, 1] and list(out.data) == [1.0, None]  # batch dimension; NaN → null
    inp = types.RequestInput(name="x", shape=[2, 2], datatype="INT32", data=[[1, 2], [3, 4]])
    assert NumpyCodec.decode_input(inp).tolist() == [[1, 2], [3, 4]]
    strings = NumpyCodec.encode_output("s", np.array(["ab", "c"]))
    assert strings.datatype == "BYTES" and list(strings.data) == [b"ab", b"c"]
    assert NumpyCodec.decode_input(bytes_input(["ab", "c"])).tolist() == ["ab", "c"]
    fixed = types.RequestInput(name="b", shape=[2, 1], datatype="BYTES", data=[b"a", b"b"])
    assert NumpyCodec.decode_input(fixed).tolist() == [[b"a"], [b"b"]]  # buffers joined
    assert NumpyCodec.can_encode(np.zeros(1)) and not NumpyCodec.can_encode([1])


def test_numpy_request_codec() -> None:
    req = NumpyRequestCodec.encode_request(np.array([[1, 2]]))
    assert req.parameters.content_type == "np"
    assert NumpyRequestCodec.decode_request(req).tolist() == [[1, 2]]
    res = NumpyRequestCodec.encode_response("m", np.array([3]))
    assert NumpyRequestCodec.decode_response(res).tolist() == [[3]]


# -- Base64Codec and DatetimeCodec ----------------------------------------------------------------


def test_base64_codec_round_trip_and_lenient_decoding() -> None:
    out = Base64Codec.encode_output("o", [b"\x00\xff", b"hi"])
    assert list(out.data) == [base64.b64encode(b"\x00\xff"), base64.b64encode(b"hi")]
    assert out.parameters.content_type == "base64" and out.shape == [2, 1]
    assert Base64Codec.decode_output(out) == [b"\x00\xff", b"hi"]
    as_text = Base64Codec.encode_input("i", [b"hi"], use_bytes=False)
    assert list(as_text.data) == ["aGk="] and Base64Codec.decode_input(as_text) == [b"hi"]
    # not base64 at all: taken as the bytes themselves
    assert Base64Codec.decode_input(bytes_input(["not base64!"])) == [b"not base64!"]
    assert Base64Codec.can_encode([b"x"]) and not Base64Codec.can_encode(["x"])


def test_datetime_codec_round_trip() -> None:
    when = datetime.datetime(2024, 5, 1, 12, 30)
    out = DatetimeCodec.encode_output("o", [when])
    assert list(out.data) == [b"2024-05-01T12:30:00"] and out.parameters.content_type == "datetime"
    assert DatetimeCodec.decode_output(out) == [when]
    assert DatetimeCodec.decode_input(bytes_input(["2024-05-01T12:30:00"])) == [when]


# -- the registry -------------------------------------------------------------------------------


def test_codecs_are_found_by_content_type_payload_and_type_hint() -> None:
    assert find_input_codec("str") is StringCodec and find_input_codec("np") is NumpyCodec
    assert find_input_codec("base64") is Base64Codec
    assert find_input_codec("datetime") is DatetimeCodec
    assert find_input_codec("nope") is None
    assert find_request_codec("np") is NumpyRequestCodec
    assert find_request_codec("str") is StringRequestCodec
    assert find_input_codec(payload=[b"x"]) is Base64Codec
    assert find_input_codec(payload=["x"]) is StringCodec
    assert find_input_codec(payload=[]) is None  # an empty payload finds nothing (MLServer's rule)
    assert find_input_codec_by_payload([]) is StringCodec  # several match: the first registered
    assert find_input_codec_by_type_hint(np.ndarray) is NumpyCodec
    assert find_input_codec(type_hint=list[str]) is StringCodec
    assert find_input_codec() is None


def test_registering_a_custom_codec() -> None:
    @codecs.register_input_codec
    class Upper(codecs.InputCodec):
        ContentType = "test-upper"

        @classmethod
        def decode_input(cls, request_input: types.RequestInput) -> list[str]:
            return [s.upper() for s in StringCodec.decode_input(request_input)]

    inp = bytes_input(["a"], content_type="test-upper")
    assert codecs.decode_request_input(inp) == ["A"]
    assert codecs.has_decoded(inp) and codecs.get_decoded(inp) == ["A"]


# -- decode_args ----------------------------------------------------------------------------------


class _Model:
    name, version = "typed", "2"

    @decode_args
    async def predict(self, x: np.ndarray, words: list[str]) -> tuple[np.ndarray, list[str]]:
        return x * 2, [w.upper() for w in words]


@pytest.mark.anyio
async def test_decode_args_decodes_by_hint_and_encodes_by_return_hint() -> None:
    req = types.InferenceRequest(
        inputs=[
            types.RequestInput(name="x", shape=[2], datatype="INT64", data=[1, 2]),
            bytes_input(["a"]).model_copy(update={"name": "words"}),
        ]
    )
    res = await _Model().predict(req)
    assert (res.model_name, res.model_version) == ("typed", "2")
    assert [o.name for o in res.outputs] == ["output-0", "output-1"]
    assert list(res.outputs[0].data) == [2, 4] and list(res.outputs[1].data) == [b"A"]


@pytest.mark.anyio
async def test_decode_args_errors() -> None:
    unknown = types.InferenceRequest(inputs=[bytes_input(["a"]).model_copy(update={"name": "z"})])
    with pytest.raises(InputsNotFound, match="Input 'z' was not found"):
        await _Model().predict(unknown)

    class Wrong:
        name, version = "w", None

        @decode_args
        async def predict(self, x: np.ndarray) -> np.ndarray:
            return "not an array"  # type: ignore[return-value]

    req = types.InferenceRequest(
        inputs=[types.RequestInput(name="x", shape=[1], datatype="INT64", data=[1])]
    )
    with pytest.raises(OutputNotFound, match="position '0'"):
        await Wrong().predict(req)
    with pytest.raises(CodecNotFound, match="with name 'x'"):

        @decode_args
        async def predict(self, x: dict) -> np.ndarray: ...
