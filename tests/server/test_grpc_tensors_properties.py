"""Property tests of the gRPC tensors (``server/grpc/_tensors.py``): OIP protobuf messages ↔
numpy, without a server.

- Requests: every datatype with a typed ``contents`` field, every shape (0-size included), reads
  back the values sent; FP64 and the integers bit for bit. FP32 too, except that a NaN's payload
  is not promised: protobuf hands Python a float32 as a Python float, a C conversion that may
  quiet it. ``raw_input_contents`` decode bit for bit for every datatype, NaN payloads included.
- Responses: what a model returns comes out of the typed field or the raw contents as the same
  values, and a decoded raw input sent back as an output is the very bytes the client sent
  (the echo is an identity).
- Any request a client can build (any datatypes, shapes, typed fields, raw contents, counts)
  converts and decodes, or raises :class:`InvalidInput`, never another exception.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import event, example, given
from hypothesis import strategies as st
from tensor_strategies import (
    DTYPES,
    FIXED,
    any_datatypes,
    arrays,
    bits,
    datatypes_and_arrays,
    shapes,
    texts,
)

from podium import codecs
from podium.errors import InvalidInput
from podium.server.grpc._tensors import TYPED_FIELD, ModelInferRequest, to_message, to_request
from podium.types import InferenceResponse, ResponseOutput

_INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


def wire_bytes(datatype: str, arr: np.ndarray) -> bytes:
    """``arr`` as raw contents, written without the codecs (BF16: the upper half of float32)."""
    if datatype == "BF16":
        return (arr.astype("<f4").view("<u4") >> 16).astype("<u2").tobytes()
    if datatype == "BOOL":
        return arr.astype("u1").tobytes()
    return arr.astype(arr.dtype.newbyteorder("<")).tobytes()


def decode(message: Any) -> dict[str, Any]:
    return codecs.decode_request(to_request(message))


# -- requests ----------------------------------------------------------------------------------


@given(
    st.sampled_from([dt for dt in FIXED if dt in TYPED_FIELD]).flatmap(
        lambda dt: st.tuples(st.just(dt), arrays(dt))
    )
)
def test_typed_contents_decode_to_the_values_sent(case: tuple[str, np.ndarray]) -> None:
    datatype, arr = case
    message = ModelInferRequest(model_name="m")
    tensor = message.inputs.add(name="x", datatype=datatype, shape=list(arr.shape))
    getattr(tensor.contents, TYPED_FIELD[datatype]).extend(arr.ravel().tolist())
    got = decode(message)["x"]
    assert got.dtype == DTYPES[datatype] and got.shape == arr.shape
    if datatype == "FP32":
        nan = np.isnan(arr)
        assert np.array_equal(np.isnan(got), nan)
        assert np.array_equal(bits(got[~nan]), bits(arr[~nan]))
    else:
        assert np.array_equal(bits(got), bits(arr))


@given(st.lists(st.binary(max_size=12), max_size=8))
def test_typed_bytes_contents_decode_to_the_bytes_sent(blobs: list[bytes]) -> None:
    message = ModelInferRequest(model_name="m")
    tensor = message.inputs.add(name="x", datatype="BYTES", shape=[len(blobs)])
    tensor.contents.bytes_contents.extend(blobs)
    assert decode(message)["x"] == blobs


@given(st.lists(datatypes_and_arrays(), min_size=1, max_size=3))
def test_raw_input_contents_decode_bit_for_bit(cases: list[tuple[str, np.ndarray]]) -> None:
    message = ModelInferRequest(model_name="m")
    for index, (datatype, arr) in enumerate(cases):
        message.inputs.add(name=f"x{index}", datatype=datatype, shape=list(arr.shape))
        message.raw_input_contents.append(wire_bytes(datatype, arr))
    decoded = decode(message)
    for index, (datatype, arr) in enumerate(cases):
        got = decoded[f"x{index}"]
        assert got.dtype == DTYPES[datatype] and got.shape == arr.shape
        assert np.array_equal(bits(got), bits(arr))


@given(st.lists(st.binary(max_size=12), max_size=8))
def test_raw_bytes_contents_decode_to_the_bytes_sent(blobs: list[bytes]) -> None:
    message = ModelInferRequest(model_name="m")
    message.inputs.add(name="x", datatype="BYTES", shape=[len(blobs)])
    message.raw_input_contents.append(b"".join(len(b).to_bytes(4, "little") + b for b in blobs))
    assert decode(message)["x"] == blobs


# -- responses ---------------------------------------------------------------------------------


def answer(*outputs: ResponseOutput) -> InferenceResponse:
    return InferenceResponse(outputs=list(outputs), model_name="m", model_version="1", id="r")


@given(datatypes_and_arrays(), st.booleans())
def test_a_returned_array_comes_back_with_the_same_values(
    case: tuple[str, np.ndarray], raw: bool
) -> None:
    datatype, arr = case
    if datatype == "BF16":
        out = ResponseOutput(name="y", shape=list(arr.shape), datatype="BF16", data=arr)
    else:
        out = codecs.encode_output("y", arr)  # the flat list every model result becomes
    message = to_message(answer(out), raw=raw)
    (tensor,) = message.outputs
    assert (tensor.name, tensor.datatype, list(tensor.shape)) == ("y", datatype, list(arr.shape))
    if message.raw_output_contents:
        got = codecs.decode_raw("y", datatype, list(arr.shape), message.raw_output_contents[0])
        assert isinstance(got, np.ndarray)
    else:
        assert not raw and datatype in TYPED_FIELD
        values = list(getattr(tensor.contents, TYPED_FIELD[datatype]))
        got = np.array(values, dtype=DTYPES[datatype]).reshape(arr.shape)
    if arr.dtype.kind == "f":  # a Python float carries a float32 or float16 NaN, not its payload
        nan = np.isnan(arr)
        assert np.array_equal(np.isnan(got), nan)
        assert np.array_equal(bits(got[~nan]), bits(arr[~nan]))
    else:
        assert np.array_equal(got, arr)


@given(datatypes_and_arrays())
@example(("BF16", np.array([0x7F81_0000], dtype="<u4").view("<f4")))  # a signalling NaN
def test_a_raw_input_sent_back_is_the_bytes_the_client_sent(case: tuple[str, np.ndarray]) -> None:
    datatype, arr = case
    sent = wire_bytes(datatype, arr)
    request = ModelInferRequest(model_name="m")
    request.inputs.add(name="x", datatype=datatype, shape=list(arr.shape))
    request.raw_input_contents.append(sent)
    value = decode(request)["x"]
    out = ResponseOutput(name="x", shape=list(arr.shape), datatype=datatype, data=value)
    message = to_message(answer(out), raw=True)
    assert message.raw_output_contents[0] == sent


@given(st.lists(st.one_of(texts, st.binary(max_size=8)), max_size=6), st.booleans())
def test_bytes_outputs_come_back_as_their_utf8_bytes(items: list[Any], raw: bool) -> None:
    out = ResponseOutput(name="y", shape=[len(items)], datatype="BYTES", data=items)
    message = to_message(answer(out), raw=raw)
    expected = [i.encode() if isinstance(i, str) else i for i in items]
    if raw:
        got = codecs.decode_raw("y", "BYTES", [len(items)], message.raw_output_contents[0])
    else:
        got = list(message.outputs[0].contents.bytes_contents)
    assert got == expected


# -- malformed requests ------------------------------------------------------------------------

_TYPED_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "bool_contents": st.booleans(),
    "int_contents": st.integers(min_value=-(2**31), max_value=2**31 - 1),
    "int64_contents": _INT64,
    "uint_contents": st.integers(min_value=0, max_value=2**32 - 1),
    "uint64_contents": st.integers(min_value=0, max_value=2**64 - 1),
    "fp32_contents": st.floats(width=32),
    "fp64_contents": st.floats(),
    "bytes_contents": st.binary(max_size=6),
}

_PARAMETERS: dict[str, st.SearchStrategy[Any]] = {
    "bool_param": st.booleans(),
    "int64_param": _INT64,
    "uint64_param": st.integers(min_value=0, max_value=2**64 - 1),
    "double_param": st.floats(),
    "string_param": st.one_of(st.just("str"), texts),
}

#: Shapes as a protobuf carries them: any int64s, negative and absurd ones included.
wire_shapes = st.one_of(
    shapes(),
    st.lists(_INT64, max_size=4),
    st.lists(st.sampled_from([-1, 0, 1, 2**31, 2**62, 2**63 - 1]), max_size=4),
)


@st.composite
def any_requests(draw: st.DrawFn) -> Any:
    message = ModelInferRequest(model_name="m")
    for index in range(draw(st.integers(min_value=0, max_value=3))):
        name = draw(st.one_of(st.just(f"x{index}"), st.just("x0"), texts))
        tensor = message.inputs.add(
            name=name, datatype=draw(any_datatypes), shape=draw(wire_shapes)
        )
        for field in draw(st.lists(st.sampled_from(sorted(_TYPED_VALUES)), max_size=2)):
            getattr(tensor.contents, field).extend(draw(st.lists(_TYPED_VALUES[field], max_size=6)))
        for kind in draw(st.lists(st.sampled_from(sorted(_PARAMETERS)), max_size=2)):
            key = draw(st.sampled_from(["content_type", "binary_data_size", "p"]))
            setattr(tensor.parameters[key], kind, draw(_PARAMETERS[kind]))
    if draw(st.booleans()):
        message.raw_input_contents.extend(draw(st.lists(st.binary(max_size=24), max_size=4)))
    return message


@given(any_requests())
@example(  # a 0-size shape numpy cannot hold
    ModelInferRequest(inputs=[{"name": "x", "datatype": "FP32", "shape": [0, 2**62, 2**62]}])
)
def test_any_request_decodes_or_raises_invalid_input(message: Any) -> None:
    try:
        decoded = decode(message)
    except InvalidInput as exc:
        event(f"rejected: {type(exc).__name__}")
        return
    event("decoded")
    for tensor in message.inputs:
        got = decoded[tensor.name]
        count = math.prod(tensor.shape)
        if tensor.datatype == "BYTES":
            assert isinstance(got, list) and len(got) == count
        else:
            assert got.dtype == DTYPES[tensor.datatype] and list(got.shape) == list(tensor.shape)
