"""Tests for the raw tensor codec (podium.codecs.decode_raw / encode_raw)."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest

from podium.codecs import decode_input, decode_raw, encode_output, encode_raw
from podium.errors import InvalidTensor, UnsupportedRepresentation
from podium.types import RequestInput, ResponseOutput

ml_dtypes = pytest.importorskip("ml_dtypes")

FIXED = {
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
}


def _sample(dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
    rng = np.random.default_rng(7)
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


def _length_prefixed(*items: bytes) -> bytes:
    return b"".join(struct.pack("<I", len(item)) + item for item in items)


# ---------------------------------------------------------------------------------------------
# decode_raw: fixed-size datatypes


@pytest.mark.parametrize("datatype", sorted(FIXED))
def test_decode_raw_gives_the_exact_dtype_and_shape(datatype: str) -> None:
    sent = _sample(FIXED[datatype], (2, 3))
    got = decode_raw("x", datatype, [2, 3], sent.tobytes())
    assert isinstance(got, np.ndarray)
    assert got.dtype == np.dtype(FIXED[datatype])
    assert got.shape == (2, 3)
    np.testing.assert_array_equal(got, sent)


@pytest.mark.parametrize("datatype", sorted(FIXED))
def test_decode_raw_reads_little_endian_whatever_the_machine(datatype: str) -> None:
    sent = _sample(FIXED[datatype], (4,))
    wire = sent.astype(np.dtype(FIXED[datatype]).newbyteorder("<")).tobytes()
    np.testing.assert_array_equal(decode_raw("x", datatype, [4], wire), sent)


def test_decode_raw_is_a_read_only_view_of_bytes_without_a_copy() -> None:
    body = np.arange(6, dtype=np.float32).tobytes()
    got = decode_raw("x", "FP32", [6], body)
    assert isinstance(got, np.ndarray)
    assert not got.flags.writeable
    assert not got.flags.owndata  # a view of the bytes, not a copy


def test_decode_raw_reads_a_memoryview_slice_at_any_offset() -> None:
    sent = np.array([1.5, -2.0, 3.25], dtype=np.float64)
    body = b"{json}" + b"X" + sent.tobytes() + b"tail"  # an unaligned offset
    view = memoryview(body)[7 : 7 + 24]
    got = decode_raw("x", "FP64", [3], view)
    np.testing.assert_array_equal(got, sent)


def test_decode_raw_writable_buffer_gives_a_writable_array() -> None:
    got = decode_raw("x", "INT32", [2], bytearray(8))
    assert isinstance(got, np.ndarray)
    assert got.flags.writeable


def test_decode_raw_bool_is_one_byte_per_element() -> None:
    got = decode_raw("b", "BOOL", [2, 2], b"\x00\x01\x01\x00")
    assert isinstance(got, np.ndarray)
    assert got.dtype == np.bool_
    assert got.tolist() == [[False, True], [True, False]]


def test_decode_raw_bool_takes_any_nonzero_byte_as_true() -> None:
    got = decode_raw("b", "BOOL", [3], b"\x00\x02\xff")
    assert isinstance(got, np.ndarray)
    assert got.tolist() == [False, True, True]
    assert got.view(np.uint8).tolist() == [0, 1, 1]  # a proper numpy bool, not byte 2 or 255


def test_decode_raw_fp16() -> None:
    sent = np.array([0.5, -1.0, 65504.0, np.inf], dtype=np.float16)
    got = decode_raw("h", "FP16", [4], sent.tobytes())
    assert isinstance(got, np.ndarray)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, sent)


def test_decode_raw_bf16_gives_the_exact_values_as_float32() -> None:
    sent = np.array([1.5, -2.25, 3.14159, 1e38, -np.inf, 0.0], dtype=ml_dtypes.bfloat16)
    got = decode_raw("b", "BF16", [2, 3], sent.tobytes())
    assert isinstance(got, np.ndarray)
    assert got.dtype == np.float32
    assert got.shape == (2, 3)
    np.testing.assert_array_equal(got.ravel(), sent.astype(np.float32))


def test_decode_raw_bf16_nan_stays_nan() -> None:
    sent = np.array([np.nan], dtype=ml_dtypes.bfloat16)
    got = decode_raw("b", "BF16", [1], sent.tobytes())
    assert np.isnan(got).all()


@pytest.mark.parametrize("datatype", ["FP32", "BOOL", "BF16", "BYTES"])
def test_decode_raw_empty_tensor(datatype: str) -> None:
    got = decode_raw("e", datatype, [0, 3], b"")
    if datatype == "BYTES":
        assert got == []
    else:
        assert isinstance(got, np.ndarray)
        assert got.shape == (0, 3)


def test_decode_raw_scalar_shape() -> None:
    got = decode_raw("s", "INT64", [], struct.pack("<q", -5))
    assert isinstance(got, np.ndarray)
    assert got.shape == ()
    assert got.item() == -5


def test_decode_raw_wrong_byte_size_says_how_many() -> None:
    with pytest.raises(InvalidTensor) as info:
        decode_raw("x", "FP32", [2, 3], b"\x00" * 20)
    assert str(info.value) == (
        "input 'x' of datatype FP32 and shape [2, 3] needs 24 bytes of raw data, got 20"
    )


def test_decode_raw_too_many_bytes_is_an_error_too() -> None:
    with pytest.raises(InvalidTensor, match="needs 2 bytes of raw data, got 3"):
        decode_raw("b", "BOOL", [2], b"\x00\x01\x01")


def test_decode_raw_bf16_size_is_two_bytes_per_element() -> None:
    with pytest.raises(InvalidTensor, match="BF16 and shape \\[3\\] needs 6 bytes"):
        decode_raw("b", "BF16", [3], b"\x00" * 12)


def test_decode_raw_unknown_datatype() -> None:
    with pytest.raises(InvalidTensor, match="input 'x' has unknown datatype 'FP8'"):
        decode_raw("x", "FP8", [1], b"\x00")


@pytest.mark.parametrize("shape", [[-1, 2], ["2"], "3", [1.5]])
def test_decode_raw_bad_shape(shape: Any) -> None:
    with pytest.raises(InvalidTensor, match="input 'x' has shape"):
        decode_raw("x", "UINT8", shape, b"")


# ---------------------------------------------------------------------------------------------
# decode_raw: BYTES


def test_decode_raw_bytes_gives_a_flat_list_of_bytes() -> None:
    items = [b"a", b"", b"\x00\xff raw", "é".encode()]
    got = decode_raw("s", "BYTES", [2, 2], _length_prefixed(*items))
    assert got == items
    assert all(type(item) is bytes for item in got)


def test_decode_raw_bytes_from_a_memoryview() -> None:
    wire = b"head" + _length_prefixed(b"xy", b"z")
    assert decode_raw("s", "BYTES", [2], memoryview(wire)[4:]) == [b"xy", b"z"]


def test_decode_raw_bytes_matches_tritonclient_serialisation() -> None:
    utils = pytest.importorskip("tritonclient.utils")
    tensor = np.array([[b"one", b"\x00two\x00"], [b"", b"four"]], dtype=object)
    wire = utils.serialize_byte_tensor(tensor).item()
    assert decode_raw("s", "BYTES", [2, 2], wire) == tensor.ravel().tolist()


def test_decode_raw_bytes_truncated_length() -> None:
    wire = _length_prefixed(b"ab") + b"\x01\x00"
    with pytest.raises(InvalidTensor) as info:
        decode_raw("s", "BYTES", [2], wire)
    assert str(info.value) == (
        "input 's' of datatype BYTES is truncated: element 1 has only 2 of the 4 bytes of its "
        "length"
    )


def test_decode_raw_bytes_truncated_element() -> None:
    wire = _length_prefixed(b"ab", b"cdef")[:-1]
    with pytest.raises(InvalidTensor) as info:
        decode_raw("s", "BYTES", [2], wire)
    assert str(info.value) == (
        "input 's' of datatype BYTES is truncated: element 1 declares 4 bytes but only 3 remain"
    )


def test_decode_raw_bytes_too_few_elements() -> None:
    with pytest.raises(InvalidTensor) as info:
        decode_raw("s", "BYTES", [3], _length_prefixed(b"a", b"b"))
    assert str(info.value) == "input 's' has shape [3] (3 elements) but 2 data elements"


def test_decode_raw_bytes_too_many_elements() -> None:
    with pytest.raises(InvalidTensor, match=r"shape \[1\] \(1 element\) but 2 data elements"):
        decode_raw("s", "BYTES", [1], _length_prefixed(b"a", b"b"))


def test_decode_raw_bytes_trailing_bytes() -> None:
    with pytest.raises(InvalidTensor) as info:
        decode_raw("s", "BYTES", [2], _length_prefixed(b"a", b"b") + b"\x07")
    assert str(info.value) == (
        "input 's' of datatype BYTES and shape [2] has 1 trailing byte after its 2 elements"
    )


# ---------------------------------------------------------------------------------------------
# decode_input over decode_raw's results


def test_decode_input_uses_a_raw_array_as_it_is() -> None:
    arr = decode_raw("x", "FP32", [6], np.arange(6, dtype=np.float32).tobytes())
    inp = RequestInput(name="x", shape=[2, 3], datatype="FP32", data=arr)
    got = decode_input(inp)
    assert isinstance(got, np.ndarray)
    assert got.shape == (2, 3)
    assert np.shares_memory(got, arr)


def test_decode_input_bf16_raw_array() -> None:
    arr = decode_raw("x", "BF16", [2], np.array([1, 2], dtype=ml_dtypes.bfloat16).tobytes())
    got = decode_input(RequestInput(name="x", shape=[2], datatype="BF16", data=arr))
    assert isinstance(got, np.ndarray)
    assert got.dtype == np.float32
    assert got.tolist() == [1.0, 2.0]


def test_decode_input_array_of_another_dtype_is_still_checked() -> None:
    data = np.array([1.5, 2.0])
    with pytest.raises(InvalidTensor, match="non-integral element 1.5"):
        decode_input(RequestInput(name="x", shape=[2], datatype="INT32", data=data))


def test_decode_input_array_with_wrong_count_is_an_error() -> None:
    data = np.zeros(4, dtype=np.float32)
    with pytest.raises(InvalidTensor, match=r"shape \[5\] \(5 elements\) but 4 data elements"):
        decode_input(RequestInput(name="x", shape=[5], datatype="FP32", data=data))


def test_decode_input_raw_bytes_stay_bytes() -> None:
    data = decode_raw("s", "BYTES", [2], _length_prefixed(b"\xff\x00", b"ok"))
    got = decode_input(RequestInput(name="s", shape=[2], datatype="BYTES", data=data))
    assert got == [b"\xff\x00", b"ok"]


def test_decode_input_raw_bytes_with_content_type_str_become_str() -> None:
    data = decode_raw("s", "BYTES", [2], _length_prefixed("héllo".encode(), b"x"))
    inp = RequestInput(
        name="s", shape=[2], datatype="BYTES", data=data, parameters={"content_type": "str"}
    )
    assert decode_input(inp) == ["héllo", "x"]


def test_decode_input_raw_bytes_content_type_str_rejects_bad_utf8() -> None:
    inp = RequestInput(
        name="s", shape=[1], datatype="BYTES", data=[b"\xff"], parameters={"content_type": "str"}
    )
    with pytest.raises(InvalidTensor, match="content_type 'str' but element .* not valid UTF-8"):
        decode_input(inp)


# ---------------------------------------------------------------------------------------------
# encode_raw


@pytest.mark.parametrize("datatype", sorted(FIXED))
def test_encode_raw_of_encode_output_round_trips(datatype: str) -> None:
    sent = _sample(FIXED[datatype], (3, 2))
    out = encode_output("y", sent)
    assert out.datatype == datatype
    wire = encode_raw(out)
    assert wire == sent.astype(np.dtype(FIXED[datatype]).newbyteorder("<")).tobytes()
    np.testing.assert_array_equal(decode_raw("y", datatype, out.shape, wire), sent)


def test_encode_raw_takes_a_numpy_array_as_data() -> None:
    arr = np.arange(4, dtype=np.int16).reshape(2, 2)
    out = ResponseOutput(name="y", shape=[2, 2], datatype="INT16", data=arr)
    assert encode_raw(out) == arr.tobytes()


def test_encode_raw_converts_to_the_named_datatype() -> None:
    out = ResponseOutput(name="y", shape=[2], datatype="FP32", data=[1, 2.5])
    assert encode_raw(out) == np.array([1, 2.5], dtype="<f4").tobytes()


def test_encode_raw_takes_nested_lists() -> None:
    out = ResponseOutput(name="y", shape=[2, 2], datatype="INT8", data=[[1, -2], [3, -4]])
    assert encode_raw(out) == bytes([1, 0xFE, 3, 0xFC])


def test_encode_raw_bool_is_one_byte_per_element() -> None:
    out = encode_output("y", [True, False, True])
    assert encode_raw(out) == b"\x01\x00\x01"


def test_encode_raw_fp16() -> None:
    arr = np.array([0.5, -3.0], dtype=np.float16)
    assert encode_raw(encode_output("y", arr)) == arr.tobytes()


def test_encode_raw_bf16_matches_ml_dtypes_rounding() -> None:
    values = np.random.default_rng(3).standard_normal(2000).astype(np.float32)
    values = np.concatenate([values, np.float32([np.inf, -np.inf, 0.0, -0.0, 3.4e38])])
    out = ResponseOutput(name="y", shape=[values.size], datatype="BF16", data=values.tolist())
    assert encode_raw(out) == values.astype(ml_dtypes.bfloat16).tobytes()


def test_encode_raw_bf16_rounds_ties_to_even() -> None:
    # 1 + 2**-8 lies halfway between bfloat16's 1.0 and 1 + 2**-7: the even one (1.0) wins;
    # 1 + 3 * 2**-8 lies halfway between 1 + 2**-7 and 1 + 2**-6: 1 + 2**-6 is even.
    out = ResponseOutput(name="y", shape=[2], datatype="BF16", data=[1 + 2**-8, 1 + 3 * 2**-8])
    got = decode_raw("y", "BF16", [2], encode_raw(out))
    assert isinstance(got, np.ndarray)
    assert got.tolist() == [1.0, 1 + 2**-6]


def test_encode_raw_bf16_keeps_nan_as_nan() -> None:
    bits = np.array([0x7FFFFFFF, 0xFFFFFFFF, 0x7F800001], dtype=np.uint32)
    out = ResponseOutput(name="y", shape=[3], datatype="BF16", data=bits.view(np.float32))
    got = decode_raw("y", "BF16", [3], encode_raw(out))
    assert np.isnan(got).all()


def test_encode_raw_bytes_has_length_prefixes() -> None:
    out = ResponseOutput(name="y", shape=[3], datatype="BYTES", data=["hé", b"\x00\xff", ""])
    assert encode_raw(out) == _length_prefixed("hé".encode(), b"\x00\xff", b"")


def test_encode_raw_bytes_matches_what_tritonclient_decodes() -> None:
    utils = pytest.importorskip("tritonclient.utils")
    out = encode_output("y", ["a", "bc", ""])
    assert utils.deserialize_bytes_tensor(encode_raw(out)).tolist() == [b"a", b"bc", b""]


def test_encode_raw_bytes_from_an_object_array() -> None:
    arr = np.array([[b"a", b"b"]], dtype=object)
    out = ResponseOutput(name="y", shape=[1, 2], datatype="BYTES", data=arr)
    assert encode_raw(out) == _length_prefixed(b"a", b"b")


def test_encode_raw_empty() -> None:
    assert encode_raw(ResponseOutput(name="y", shape=[0], datatype="FP32", data=[])) == b""
    assert encode_raw(ResponseOutput(name="y", shape=[0], datatype="BYTES", data=[])) == b""


def test_encode_raw_unknown_datatype() -> None:
    out = ResponseOutput(name="y", shape=[1], datatype="FP8", data=[1.0])
    with pytest.raises(UnsupportedRepresentation, match="output 'y' has unknown datatype 'FP8'"):
        encode_raw(out)


def test_encode_raw_count_must_match_the_shape() -> None:
    out = ResponseOutput(name="y", shape=[2, 2], datatype="FP32", data=[1.0, 2.0, 3.0])
    with pytest.raises(
        UnsupportedRepresentation,
        match=r"output 'y' has shape \[2, 2\] \(4 elements\) but 3 data elements",
    ):
        encode_raw(out)


def test_encode_raw_bytes_count_must_match_the_shape() -> None:
    out = ResponseOutput(name="y", shape=[2], datatype="BYTES", data=["a"])
    with pytest.raises(UnsupportedRepresentation, match="2 elements by its shape but 1"):
        encode_raw(out)


def test_encode_raw_value_out_of_range() -> None:
    out = ResponseOutput(name="y", shape=[1], datatype="UINT8", data=[300])
    with pytest.raises(UnsupportedRepresentation, match="output 'y' of datatype UINT8"):
        encode_raw(out)


def test_encode_raw_bytes_element_of_the_wrong_type() -> None:
    out = ResponseOutput(name="y", shape=[2], datatype="BYTES", data=["a", 3])
    with pytest.raises(UnsupportedRepresentation, match="must hold str or bytes.*3 \\(int\\)"):
        encode_raw(out)


def test_encode_raw_of_an_array_already_in_its_wire_dtype() -> None:
    arr = np.arange(12, dtype="<f4").reshape(3, 4)
    strided = arr[:, ::2]  # not contiguous: the bytes are still row-major
    out = ResponseOutput(name="y", shape=[3, 2], datatype="FP32", data=strided)
    assert encode_raw(out) == np.ascontiguousarray(strided).tobytes()
    big_endian = arr.astype(">f4")  # same values, other byte order: converted
    out = ResponseOutput(name="y", shape=[3, 4], datatype="FP32", data=big_endian)
    assert encode_raw(out) == arr.tobytes()
    flags = np.array([0, 2, 1], dtype="u1")  # BOOL from uint8: still normalised to 0/1
    assert encode_raw(ResponseOutput(name="b", shape=[3], datatype="BOOL", data=flags)) == (
        b"\x00\x01\x01"
    )
    with pytest.raises(UnsupportedRepresentation, match="shape"):
        encode_raw(ResponseOutput(name="y", shape=[5], datatype="FP32", data=arr))
