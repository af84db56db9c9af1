"""Property tests of raw tensors: the binary tensor extension of REST and the raw contents of
gRPC (:func:`podium.codecs.encode_raw` / :func:`podium.codecs.decode_raw`).

- Every fixed-size datatype and shape: an array encodes to its little-endian bytes and decodes
  back bit for bit, every NaN payload (signalling ones too) and -0.0 included; raw bytes decode
  and encode back to the same bytes (BOOL: any non-zero byte is true and comes back as 1).
- Data given as a list (what :func:`encode_output` makes) round-trips every value; NaN stays NaN,
  but its payload is not promised: a Python float carries a float32 or float16 NaN through C
  conversions that may quiet it.
- ``BYTES``: each element is a 4-byte little-endian length and its bytes, any bytes at all;
  ``str`` elements are UTF-8. These properties are about the raw framing only, so they hold
  whatever JSON answers do with ``BYTES`` outputs.
- Any bytes, datatype and shape (truncated frames, wrong lengths, trailing bytes, absurd shapes)
  either decode to a tensor of that shape or raise :class:`InvalidInput`, never another error.
"""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, event, example, given
from hypothesis import strategies as st
from tensor_strategies import (
    DTYPES,
    FIXED,
    ITEMSIZE,
    any_datatypes,
    any_shapes,
    arrays,
    bits,
    datatypes_and_arrays,
    json_values,
    shapes,
    shapes_of,
    texts,
)

from podium import codecs
from podium.errors import InvalidInput, InvalidTensor, UnsupportedRepresentation
from podium.types import ResponseOutput


def output(datatype: str, shape: list[int], data: Any) -> ResponseOutput:
    return ResponseOutput(name="x", shape=shape, datatype=datatype, data=data)


def frame(blobs: list[bytes]) -> bytes:
    """The raw BYTES tensor of ``blobs``, written out by hand."""
    return b"".join(struct.pack("<I", len(b)) + b for b in blobs)


@given(datatypes_and_arrays())
@example(("BF16", np.array([0x7F81_0000], dtype="<u4").view("<f4")))  # a signalling NaN
@example(("BF16", np.array([0xFF80_0000, 0x8000_0000], dtype="<u4").view("<f4")))  # -inf, -0
@example(("FP32", np.array([0x7F80_0001], dtype="<u4").view("<f4")))
def test_arrays_round_trip_bit_for_bit(case: tuple[str, np.ndarray]) -> None:
    datatype, arr = case
    shape = list(arr.shape)
    raw = codecs.encode_raw(output(datatype, shape, arr))
    assert len(raw) == arr.size * ITEMSIZE[datatype]
    got = codecs.decode_raw("x", datatype, shape, raw)
    assert isinstance(got, np.ndarray)
    assert got.dtype == DTYPES[datatype] and got.shape == arr.shape
    assert np.array_equal(bits(got), bits(arr))


@st.composite
def raw_tensors(draw: st.DrawFn) -> tuple[str, list[int], bytes]:
    datatype = draw(st.sampled_from(FIXED))
    shape = draw(shapes())
    size = math.prod(shape) * ITEMSIZE[datatype]
    return datatype, shape, draw(st.binary(min_size=size, max_size=size))


@given(raw_tensors())
def test_raw_bytes_decode_and_encode_back_to_themselves(case: tuple[str, list[int], bytes]) -> None:
    # The echo of a raw input: what a model gets is what it can send back unchanged.
    datatype, shape, raw = case
    got = codecs.decode_raw("x", datatype, shape, raw)
    assert isinstance(got, np.ndarray) and list(got.shape) == shape
    again = codecs.encode_raw(output(datatype, shape, got))
    if datatype == "BOOL":
        assert got.tolist() == (np.frombuffer(raw, "u1") != 0).reshape(shape).tolist()
        assert again == bytes(b != 0 for b in raw)
    else:
        assert again == raw


@given(datatypes_and_arrays())
def test_list_data_round_trips_every_value(case: tuple[str, np.ndarray]) -> None:
    datatype, arr = case
    shape = list(arr.shape)
    raw = codecs.encode_raw(output(datatype, shape, arr.ravel().tolist()))
    got = codecs.decode_raw("x", datatype, shape, raw)
    assert isinstance(got, np.ndarray) and got.shape == arr.shape
    if arr.dtype.kind == "f":
        nan = np.isnan(arr)
        assert np.array_equal(np.isnan(got), nan)
        assert np.array_equal(bits(got[~nan]), bits(arr[~nan]))
    else:
        assert np.array_equal(got, arr)


@given(st.lists(st.binary(max_size=20), max_size=10), st.data())
def test_bytes_frames_round_trip_any_bytes(blobs: list[bytes], data: st.DataObject) -> None:
    # Any shape of as many elements: the framing is flat whatever the shape says.
    shape = data.draw(shapes_of(len(blobs)))
    raw = codecs.encode_raw(output("BYTES", shape, blobs))
    assert raw == frame(blobs)
    assert codecs.decode_raw("x", "BYTES", shape, raw) == blobs
    assert codecs.decode_raw("x", "BYTES", shape, memoryview(raw)) == blobs


@given(st.lists(texts, max_size=10))
def test_text_elements_frame_as_utf8(strings: list[str]) -> None:
    raw = codecs.encode_raw(output("BYTES", [len(strings)], strings))
    assert codecs.decode_raw("x", "BYTES", [len(strings)], raw) == [s.encode() for s in strings]


# -- malformed raw tensors ---------------------------------------------------------------------


def check_decodes_or_rejects(datatype: Any, shape: Any, raw: bytes) -> None:
    try:
        got = codecs.decode_raw("x", datatype, shape, raw)
    except InvalidInput as exc:
        event(f"rejected: {type(exc).__name__}")
        return
    event("decoded")
    count = math.prod(shape)
    if datatype == "BYTES":
        assert isinstance(got, list) and len(got) == count
        assert frame(got) == raw  # nothing skipped, nothing left over
    else:
        assert isinstance(got, np.ndarray) and list(got.shape) == shape
        assert len(raw) == count * ITEMSIZE[datatype]


@given(any_datatypes, any_shapes, st.binary(max_size=64))
@example("FP32", [0, 2**63], b"")  # numpy: "Maximum allowed dimension exceeded"
@example("INT8", [0, 2**62, 2**62], b"")  # numpy: "array is too big"
@example("BYTES", [0, 2**64], b"")
@example("FP64", [2**62], b"")
@example("BYTES", [2**62], b"\x00\x00\x00\x00")
@example("BYTES", [1], b"\xff\xff\xff\xff")
@example("UINT16", [1], b"\x00")
def test_any_raw_bytes_decode_or_raise_invalid_input(datatype: Any, shape: Any, raw: bytes) -> None:
    check_decodes_or_rejects(datatype, shape, raw)


@given(st.lists(st.binary(max_size=10), min_size=1, max_size=6), st.data())
def test_a_truncated_bytes_frame_is_invalid(blobs: list[bytes], data: st.DataObject) -> None:
    raw = frame(blobs)
    cut = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
    with pytest.raises(InvalidTensor):
        codecs.decode_raw("x", "BYTES", [len(blobs)], raw[:cut])


@given(st.lists(st.binary(max_size=10), max_size=6), st.binary(min_size=1, max_size=10))
def test_bytes_after_the_last_element_are_invalid(blobs: list[bytes], extra: bytes) -> None:
    with pytest.raises(InvalidTensor):
        codecs.decode_raw("x", "BYTES", [len(blobs)], frame(blobs) + extra)


@given(st.lists(st.binary(max_size=10), min_size=1, max_size=6), st.data())
def test_a_wrong_length_prefix_is_invalid_or_changes_the_elements(
    blobs: list[bytes], data: st.DataObject
) -> None:
    index = data.draw(st.integers(min_value=0, max_value=len(blobs) - 1))
    wrong = data.draw(st.integers(min_value=0, max_value=2**32 - 1))
    assume(wrong != len(blobs[index]))
    raw = bytearray(frame(blobs))
    offset = sum(4 + len(b) for b in blobs[:index])
    raw[offset : offset + 4] = struct.pack("<I", wrong)
    # A shorter length may still frame the same number of elements (the next prefix read from
    # the payload); then the elements differ. Either way nothing else escapes.
    try:
        got = codecs.decode_raw("x", "BYTES", [len(blobs)], bytes(raw))
    except InvalidTensor:
        return
    assert got != blobs


@given(raw_tensors(), st.integers(min_value=1, max_value=8), st.booleans())
def test_fixed_size_data_of_the_wrong_length_is_invalid(
    case: tuple[str, list[int], bytes], delta: int, shorter: bool
) -> None:
    datatype, shape, raw = case
    wrong = raw[:-delta] if shorter and len(raw) >= delta else raw + b"\x00" * delta
    with pytest.raises(InvalidTensor):
        codecs.decode_raw("x", datatype, shape, wrong)


@given(st.sampled_from([*FIXED, "BYTES"]), shapes(), st.data())
def test_shape_and_element_count_disagreeing_is_invalid(
    datatype: str, shape: list[int], data: st.DataObject
) -> None:
    count = data.draw(st.integers(min_value=0, max_value=8).filter(lambda n: n != math.prod(shape)))
    if datatype == "BYTES":
        raw = frame([b"a"] * count)
    else:
        raw = b"\x01" * (count * ITEMSIZE[datatype])
    with pytest.raises(InvalidTensor):
        codecs.decode_raw("x", datatype, shape, raw)


# -- what a model returns ---------------------------------------------------------------------

#: A model's data: JSON-like values, arrays of every dtype, and an object array of BYTES.
model_data = st.one_of(
    json_values,
    st.sampled_from(FIXED).flatmap(arrays),
    st.lists(st.one_of(texts, st.binary(max_size=4)), max_size=4).map(
        lambda items: np.array(items + [None], dtype=object)[:-1]
    ),
)

#: Shapes a model may give an output (its own ResponseOutput): lists of integers, any values.
model_shapes = st.one_of(shapes(), st.lists(st.integers(min_value=-3, max_value=2**64), max_size=3))


@given(any_datatypes, model_shapes, model_data)
@example("INT32", [1], np.array([np.nan], dtype=np.float32))  # was a RuntimeWarning from numpy
@example("INT8", [1], [300])
def test_any_output_encodes_or_raises_unsupported_representation(
    datatype: Any, shape: list[int], data: Any
) -> None:
    out = ResponseOutput(name="x", shape=shape, datatype=datatype, data=data)
    try:
        raw = codecs.encode_raw(out)
    except UnsupportedRepresentation:
        return
    assert isinstance(raw, bytes)
    if datatype != "BYTES":
        assert len(raw) == math.prod(shape) * ITEMSIZE[datatype]
