"""Property tests of the JSON side of the codecs: OIP tensors as JSON ↔ numpy.

- Every fixed-size datatype, every shape (scalars and 0-size dimensions included), flat or nested
  data, and a bare scalar for one element: what :func:`encode_output` writes as JSON,
  :func:`decode_input` reads back as the same array, bit for bit (-0.0 included).
- JSON has no NaN or Infinity, and Podium defines no spelling for them: msgspec writes them as
  ``null``, which is still valid JSON, and ``null`` in a numeric input is rejected with
  :class:`InvalidTensor`. So round trips through JSON are exact for finite values only; NaN
  payloads travel only in raw tensors (``test_raw_properties.py``).
- ``BYTES`` inputs: JSON strings (or bytes, as gRPC and Python callers give) decode to their UTF-8
  bytes, or to the strings themselves with ``content_type: "str"``. Only text is encoded on the
  output side, which holds whatever Podium does with non-UTF-8 bytes outputs in JSON.
- Whatever a client sends (any datatype, shape, data or parameters) either decodes to a tensor
  of the declared dtype and shape or raises :class:`InvalidInput`, never another exception.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import event, example, given
from hypothesis import strategies as st
from tensor_strategies import (
    DTYPES,
    FIXED,
    any_datatypes,
    any_shapes,
    arrays,
    awkward_numbers,
    bits,
    datatypes_and_arrays,
    json_values,
    nest,
    shapes,
    texts,
)

from podium import codecs
from podium.errors import InvalidInput, InvalidTensor
from podium.types import RequestInput, ResponseOutput

# What the REST front end encodes answers with and decodes request inputs with.
encoder = msgspec.json.Encoder(enc_hook=codecs.json_default)
input_decoder = msgspec.json.Decoder(RequestInput)

layouts = st.sampled_from(["flat", "nested", "scalar"])


def as_json_input(out: ResponseOutput, layout: str) -> RequestInput:
    """``out`` sent back as a request input: through JSON text, its data laid out as asked."""
    data: Any = out.data
    if layout == "nested":
        data = nest(data, out.shape)
    elif layout == "scalar" and len(data) == 1:
        data = data[0]
    sent = ResponseOutput(name=out.name, shape=out.shape, datatype=out.datatype, data=data)
    return input_decoder.decode(encoder.encode(sent))


def to_output(datatype: str, arr: np.ndarray) -> ResponseOutput:
    """``arr`` as a model's output; BF16 is never inferred, so the model names it."""
    if datatype == "BF16":
        flat = arr.ravel().tolist()
        return ResponseOutput(name="x", shape=list(arr.shape), datatype="BF16", data=flat)
    out = codecs.encode_output("x", arr)
    assert out.datatype == datatype
    return out


@given(datatypes_and_arrays(finite=True), layouts)
def test_json_round_trip_is_exact_for_every_datatype_and_shape(
    case: tuple[str, np.ndarray], layout: str
) -> None:
    datatype, arr = case
    got = codecs.decode_input(as_json_input(to_output(datatype, arr), layout))
    assert isinstance(got, np.ndarray)
    assert got.dtype == DTYPES[datatype]
    assert got.shape == arr.shape
    assert np.array_equal(bits(got), bits(arr))


@given(st.sampled_from([dt for dt in FIXED if DTYPES[dt].kind == "f"]).flatmap(arrays))
def test_non_finite_floats_become_null_and_the_json_stays_valid(arr: np.ndarray) -> None:
    out = codecs.encode_output("x", arr)
    data = msgspec.json.decode(encoder.encode(out))["data"]
    flat = arr.ravel()
    assert data == [None if not math.isfinite(v) else v for v in flat.tolist()]
    if not np.isfinite(flat).all():
        with pytest.raises(InvalidTensor):
            codecs.decode_input(as_json_input(out, "flat"))


@st.composite
def text_tensors(draw: st.DrawFn) -> tuple[list[int], list[str]]:
    shape = draw(shapes(max_side=3))
    return shape, draw(st.lists(texts, min_size=math.prod(shape), max_size=math.prod(shape)))


@given(text_tensors(), st.booleans(), st.sampled_from(["flat", "nested"]))
def test_bytes_inputs_decode_to_utf8_or_to_the_strings(
    case: tuple[list[int], list[str]], as_str: bool, layout: str
) -> None:
    shape, strings = case
    data = nest(strings, shape) if layout == "nested" else strings
    params = {"content_type": "str"} if as_str else None
    body = encoder.encode(
        RequestInput(name="x", shape=shape, datatype="BYTES", parameters=params, data=data)
    )
    got = codecs.decode_input(input_decoder.decode(body))
    assert got == (strings if as_str else [s.encode() for s in strings])


@given(st.lists(st.binary(max_size=12), max_size=8), st.booleans())
def test_bytes_elements_decode_to_themselves(blobs: list[bytes], as_str: bool) -> None:
    params = {"content_type": "str"} if as_str else None
    inp = RequestInput(
        name="x", shape=[len(blobs)], datatype="BYTES", parameters=params, data=blobs
    )
    if not as_str:
        assert codecs.decode_input(inp) == blobs
        return
    try:
        expected = [b.decode() for b in blobs]
    except UnicodeDecodeError:
        with pytest.raises(InvalidTensor):
            codecs.decode_input(inp)
    else:
        assert codecs.decode_input(inp) == expected


@given(text_tensors())
def test_text_outputs_round_trip_through_json(case: tuple[list[int], list[str]]) -> None:
    shape, strings = case
    values = np.empty(len(strings), dtype=object)
    values[:] = strings
    out = codecs.encode_output("x", values.reshape(shape))
    assert (out.datatype, out.shape) == ("BYTES", shape)
    sent = as_json_input(out, "nested")
    sent.parameters = {"content_type": "str"}
    assert codecs.decode_input(sent) == strings


# -- malformed inputs ------------------------------------------------------------------------


@st.composite
def right_count_wrong_values(draw: st.DrawFn) -> tuple[list[int], list[Any], Any]:
    """A shape, as many elements of any (mostly wrong) kind, and them as data, flat or nested."""
    shape = draw(shapes(max_side=3))
    flat = draw(st.lists(awkward_numbers, min_size=math.prod(shape), max_size=math.prod(shape)))
    return shape, flat, nest(flat, shape) if draw(st.booleans()) else flat


def check_decodes_or_rejects(inp: RequestInput) -> None:
    try:
        got = codecs.decode_input(inp)
    except InvalidInput as exc:
        event(f"rejected: {type(exc).__name__}")
        return
    event("decoded")
    count = math.prod(inp.shape)
    if inp.datatype == "BYTES":
        assert isinstance(got, list) and len(got) == count
    else:
        assert isinstance(got, np.ndarray)
        assert got.dtype == DTYPES[inp.datatype]
        assert list(got.shape) == inp.shape


parameters = st.one_of(
    st.none(),
    st.just({"content_type": "str"}),
    st.dictionaries(texts, json_values, max_size=2),
)


@given(any_shapes, any_datatypes, json_values, parameters)
@example([0, 2**63], "FP32", [], None)  # numpy: "Maximum allowed dimension exceeded"
@example([0, 2**62, 2**62], "INT8", [], None)  # numpy: "array is too big"
@example([2**62], "FP32", [], None)
@example([2**64], "BYTES", [], None)
@example([1], "FP16", [2**1100], None)
@example(
    [1], "INT64", [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]], None
)
def test_any_input_decodes_or_raises_invalid_input(
    shape: Any, datatype: Any, data: Any, params: Any
) -> None:
    check_decodes_or_rejects(
        RequestInput(name="x", shape=shape, datatype=datatype, parameters=params, data=data)
    )


@given(right_count_wrong_values(), st.sampled_from([*FIXED, "BYTES"]), parameters)
@example(([2], [2**53 + 1, 1.0], [2**53 + 1, 1.0]), "INT64", None)
@example(([1], [2**63], [2**63]), "INT64", None)
@example(([2], [2**63, -1], [2**63, -1]), "UINT64", None)
@example(([1], [True], [True]), "INT8", None)  # rejected
@example(([2], [0, False], [0, False]), "INT16", None)  # the leniency: [0, 0]
def test_data_of_the_right_count_decodes_exactly_or_raises_invalid_input(
    case: tuple[list[int], list[Any], Any], datatype: str, params: Any
) -> None:
    shape, flat, data = case
    inp = RequestInput(name="x", shape=shape, datatype=datatype, parameters=params, data=data)
    try:
        got = codecs.decode_input(inp)
    except InvalidInput:
        return
    # Nothing is wrapped, clipped or rounded on the way: what decodes, decodes to the values sent.
    # Known leniency: true/false among numbers read as 1/0 (numpy's reading of the list); only
    # data that is all booleans is rejected for a numeric datatype, because checking the type of
    # every element would double the cost of decoding numeric JSON.
    if datatype == "BYTES":
        assert all(isinstance(v, str) for v in flat)
        return
    assert isinstance(got, np.ndarray) and got.dtype == DTYPES[datatype]
    assert list(got.shape) == shape
    decoded = got.ravel().tolist()
    if datatype == "BOOL":
        assert all(isinstance(v, bool) for v in flat) and decoded == flat
        return
    assert not flat or not all(isinstance(v, bool) for v in flat)
    if DTYPES[datatype].kind in "iu":
        assert decoded == flat
    else:
        assert all(not isinstance(v, str) and v is not None for v in flat)
        exact = np.array(flat, dtype=np.float64).astype(DTYPES[datatype]).reshape(shape)
        assert np.array_equal(bits(got), bits(exact))


wire_inputs = st.fixed_dictionaries(
    {"name": texts, "shape": any_shapes, "datatype": any_datatypes, "data": json_values},
    optional={"parameters": st.dictionaries(texts, json_values, max_size=2)},
)


@given(wire_inputs)
def test_any_json_input_is_rejected_or_decoded(value: dict[str, Any]) -> None:
    # What the front end does with JSON that is not an input is its own business (a 400 too);
    # what parses as an input must then decode or be InvalidInput.
    try:
        body = encoder.encode(value)
        inp = input_decoder.decode(body)
    except (msgspec.EncodeError, msgspec.DecodeError, msgspec.ValidationError, ValueError):
        return
    check_decodes_or_rejects(inp)
