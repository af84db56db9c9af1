"""Tests for the OIP tensor codec (podium.codecs)."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import math
import pkgutil
from typing import Any

import msgspec
import numpy as np
import pytest

from podium import codecs
from podium.codecs import (
    concat_outputs,
    decode_input,
    decode_request,
    encode_output,
    encode_outputs,
    inputs_as_json,
    json_default,
)
from podium.errors import InvalidInput, InvalidTensor, UnsupportedRepresentation
from podium.types import (
    DATATYPES,
    InferenceRequest,
    InferenceResponse,
    RequestInput,
    RequestOutput,
    ResponseOutput,
)

NUMERIC = {
    "BOOL": np.bool_,
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
    "BF16": np.float32,
}


def inp(
    data: Any,
    datatype: str = "FP32",
    shape: Any = None,
    name: str = "x",
    parameters: dict[str, Any] | None = None,
) -> RequestInput:
    if shape is None:
        shape = [len(data)] if isinstance(data, list) else []
    return RequestInput(name=name, shape=shape, datatype=datatype, data=data, parameters=parameters)


def sample(datatype: str) -> list[Any]:
    if datatype == "BOOL":
        return [True, False, True, True, False, False]
    if datatype.startswith(("FP", "BF")):
        return [0.5, -1.25, 2.0, 3.5, -0.0, 100.0]
    if datatype.startswith("UINT"):
        return [0, 1, 2, 3, 4, 127]
    return [-3, -1, 0, 1, 2, 127]


# ---------------------------------------------------------------------------------------------
# Module boundary


def test_codecs_imports_only_numpy_msgspec_stdlib_and_podium_foundations() -> None:
    # Every module of the package; relative imports may name only its own modules.
    modules = [codecs] + [
        importlib.import_module(f"podium.codecs.{info.name}")
        for info in pkgutil.iter_modules(codecs.__path__)
    ]
    assert len(modules) > 1
    imported: set[str] = set()
    for module in modules:
        for node in ast.walk(ast.parse(inspect.getsource(module))):
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level:
                assert node.level == 1 and node.module is not None, ast.unparse(node)
                assert importlib.util.find_spec(f"podium.codecs.{node.module}"), node.module
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
    allowed_podium = {"podium.types", "podium.errors"}
    for module in imported:
        if module.startswith("podium"):
            assert module in allowed_podium
        else:
            top = module.split(".")[0]
            assert top in {"numpy", "msgspec", "__future__"} or top in _stdlib(), module


def _stdlib() -> frozenset[str]:
    import sys

    return frozenset(sys.stdlib_module_names)


def test_every_oip_datatype_is_decodable() -> None:
    assert set(NUMERIC) | {"BYTES"} == set(DATATYPES)


# ---------------------------------------------------------------------------------------------
# decode_input: numeric datatypes


@pytest.mark.parametrize("datatype", sorted(NUMERIC))
def test_decode_numeric_flat_gives_exact_dtype_and_shape(datatype: str) -> None:
    data = sample(datatype)
    out = decode_input(inp(data, datatype, shape=[2, 3]))
    assert isinstance(out, np.ndarray)
    assert out.dtype == np.dtype(NUMERIC[datatype])
    assert out.shape == (2, 3)
    assert out.ravel().tolist() == data


@pytest.mark.parametrize("datatype", sorted(NUMERIC))
def test_decode_numeric_nested_equals_flat(datatype: str) -> None:
    data = sample(datatype)
    nested = [data[0:3], data[3:6]]
    flat = decode_input(inp(data, datatype, shape=[2, 3]))
    deep = decode_input(inp(nested, datatype, shape=[2, 3]))
    assert isinstance(flat, np.ndarray) and isinstance(deep, np.ndarray)
    assert deep.dtype == flat.dtype
    assert deep.shape == (2, 3)
    assert np.array_equal(deep, flat)


def test_decode_nested_is_row_major_and_reshaped_to_declared_shape() -> None:
    out = decode_input(inp([[1, 2, 3], [4, 5, 6]], "INT32", shape=[3, 2]))
    assert isinstance(out, np.ndarray)
    assert out.tolist() == [[1, 2], [3, 4], [5, 6]]


def test_decode_three_level_nesting() -> None:
    data = [[[1, 2], [3, 4]], [[5, 6], [7, 8]]]
    out = decode_input(inp(data, "INT16", shape=[2, 2, 2]))
    assert isinstance(out, np.ndarray)
    assert out.dtype == np.int16
    assert out.tolist() == data


@pytest.mark.parametrize("shape", [[], [1]])
def test_decode_scalar_data(shape: list[int]) -> None:
    out = decode_input(inp(2.5, "FP64", shape=shape))
    assert isinstance(out, np.ndarray)
    assert out.shape == tuple(shape)
    assert out.dtype == np.float64
    assert out.ravel().tolist() == [2.5]


def test_decode_scalar_bool() -> None:
    out = decode_input(inp(True, "BOOL", shape=[]))
    assert isinstance(out, np.ndarray)
    assert out.dtype == np.bool_ and out.shape == () and bool(out) is True


def test_decode_scalar_for_larger_shape_is_a_count_error() -> None:
    with pytest.raises(InvalidTensor, match=r"input 'x' has shape \[2\] \(2 elements\)"):
        decode_input(inp(1.0, "FP32", shape=[2]))


def test_decode_bf16_gives_float32_values_as_sent() -> None:
    out = decode_input(inp([1.0, 0.1], "BF16"))
    assert isinstance(out, np.ndarray)
    assert out.dtype == np.float32
    assert out.tolist() == [1.0, float(np.float32(0.1))]


def test_decode_float_from_json_integers() -> None:
    out = decode_input(inp([1, 2, 3], "FP16"))
    assert isinstance(out, np.ndarray)
    assert out.dtype == np.float16 and out.tolist() == [1.0, 2.0, 3.0]


def test_decode_integer_accepts_integral_floats() -> None:
    out = decode_input(inp([1.0, -2.0, 3], "INT8"))
    assert isinstance(out, np.ndarray)
    assert out.dtype == np.int8 and out.tolist() == [1, -2, 3]


@pytest.mark.parametrize(
    ("datatype", "low", "high"),
    [
        ("UINT8", 0, 255),
        ("UINT16", 0, 65535),
        ("UINT32", 0, 2**32 - 1),
        ("UINT64", 0, 2**64 - 1),
        ("INT8", -128, 127),
        ("INT16", -(2**15), 2**15 - 1),
        ("INT32", -(2**31), 2**31 - 1),
        ("INT64", -(2**63), 2**63 - 1),
    ],
)
def test_decode_integer_bounds_are_exact(datatype: str, low: int, high: int) -> None:
    out = decode_input(inp([low, high, 1], datatype))
    assert isinstance(out, np.ndarray)
    assert out.tolist() == [low, high, 1]
    with pytest.raises(InvalidTensor, match=rf"input 'x' of datatype {datatype}.*{high + 1}"):
        decode_input(inp([1, high + 1], datatype))
    with pytest.raises(InvalidTensor, match=rf"input 'x' of datatype {datatype}.*{low - 1}"):
        decode_input(inp([low - 1, 1], datatype))


def test_decode_uint64_max_mixed_with_small_values_is_not_rounded() -> None:
    # numpy reads [2**64 - 1, 1] as float64; the codec must not lose the low bits.
    out = decode_input(inp([2**64 - 1, 1, 2**63 + 1], "UINT64"))
    assert isinstance(out, np.ndarray)
    assert out.dtype == np.uint64
    assert out.tolist() == [2**64 - 1, 1, 2**63 + 1]


def test_decode_zero_element_tensors() -> None:
    empty = decode_input(inp([], "BOOL", shape=[0]))
    assert isinstance(empty, np.ndarray)
    assert empty.dtype == np.bool_ and empty.shape == (0,)
    nested = decode_input(inp([[], []], "INT32", shape=[2, 0]))
    assert isinstance(nested, np.ndarray)
    assert nested.dtype == np.int32 and nested.shape == (2, 0)


def test_decode_accepts_numpy_array_data() -> None:
    out = decode_input(inp(np.arange(6, dtype=np.int64), "INT32", shape=[2, 3]))
    assert isinstance(out, np.ndarray)
    assert out.dtype == np.int32 and out.tolist() == [[0, 1, 2], [3, 4, 5]]


def test_decode_shape_accepts_tuple() -> None:
    out = decode_input(inp([1, 2], "INT8", shape=(2,)))
    assert isinstance(out, np.ndarray) and out.shape == (2,)


# ---------------------------------------------------------------------------------------------
# decode_input: errors


def test_decode_unknown_datatype_names_input_and_datatype() -> None:
    with pytest.raises(InvalidTensor) as info:
        decode_input(inp([1], "FLOAT32", name="pixels"))
    assert "'pixels'" in str(info.value) and "FLOAT32" in str(info.value)


@pytest.mark.parametrize("shape", [[-1], [2, -3], [1.5], ["2"], [True], "2", None, 3])
def test_decode_bad_shape(shape: Any) -> None:
    with pytest.raises(InvalidTensor, match=r"input 'x' has shape .*non-negative integers"):
        decode_input(RequestInput(name="x", shape=shape, datatype="INT32", data=[1]))


def test_decode_count_mismatch_message() -> None:
    with pytest.raises(InvalidTensor) as info:
        decode_input(inp([1, 2, 3, 4, 5], "INT32", shape=[2, 3]))
    assert str(info.value) == "input 'x' has shape [2, 3] (6 elements) but 5 data elements"


def test_decode_count_mismatch_nested() -> None:
    with pytest.raises(InvalidTensor, match=r"input 'x' has shape \[3, 2\] \(6 elements\)"):
        decode_input(inp([[1, 2], [3, 4]], "FP32", shape=[3, 2]))


def test_decode_count_mismatch_bytes() -> None:
    with pytest.raises(InvalidTensor, match=r"input 's' has shape \[3\] .* but 2 data elements"):
        decode_input(inp(["a", "b"], "BYTES", shape=[3], name="s"))


@pytest.mark.parametrize("datatype", ["INT32", "FP32", "BOOL", "BYTES"])
def test_decode_ragged_nested_lists(datatype: str) -> None:
    value: Any = True if datatype == "BOOL" else ("a" if datatype == "BYTES" else 1)
    with pytest.raises(InvalidTensor, match=r"input 'x' has ragged data"):
        decode_input(inp([[value, value], [value]], datatype, shape=[3]))


def test_decode_mixed_scalar_and_list_is_ragged() -> None:
    with pytest.raises(InvalidTensor, match=r"input 'x' has ragged data"):
        decode_input(inp([1, [2, 3]], "INT32", shape=[3]))


@pytest.mark.parametrize("datatype", sorted(set(NUMERIC) - {"BOOL"}))
def test_decode_strings_in_numeric_tensor(datatype: str) -> None:
    with pytest.raises(InvalidTensor) as info:
        decode_input(inp([1, "2"], datatype, name="num"))
    message = str(info.value)
    assert "'num'" in message and datatype in message and "'2' (str)" in message


@pytest.mark.parametrize("datatype", sorted(NUMERIC))
def test_decode_null_element(datatype: str) -> None:
    first = True if datatype == "BOOL" else 1
    with pytest.raises(InvalidTensor) as info:
        decode_input(inp([first, None], datatype))
    assert "'x'" in str(info.value) and datatype in str(info.value) and "null" in str(info.value)


@pytest.mark.parametrize("datatype", ["INT8", "INT64", "UINT8", "UINT64"])
def test_decode_non_integral_float_for_integer_type(datatype: str) -> None:
    with pytest.raises(
        InvalidTensor, match=rf"input 'x' of datatype {datatype} .*non-integral.*1\.5"
    ):
        decode_input(inp([1, 1.5], datatype))


def test_decode_non_integral_float_mixed_with_huge_int() -> None:
    with pytest.raises(InvalidTensor, match=r"non-integral element 0\.5"):
        decode_input(inp([2**64 - 1, 0.5], "UINT64"))


def test_decode_out_of_range_uint8() -> None:
    with pytest.raises(InvalidTensor) as info:
        decode_input(inp([1, 300], "UINT8", name="img"))
    assert "'img'" in str(info.value) and "UINT8" in str(info.value) and "300" in str(info.value)


@pytest.mark.parametrize("datatype", ["UINT8", "UINT16", "UINT32", "UINT64"])
def test_decode_negative_for_unsigned(datatype: str) -> None:
    with pytest.raises(InvalidTensor, match=rf"input 'x' of datatype {datatype} .*-1"):
        decode_input(inp([-1], datatype))


def test_decode_uint64_rejects_negative_mixed_with_huge() -> None:
    with pytest.raises(InvalidTensor, match=r"UINT64 has element -1 outside"):
        decode_input(inp([2**64 - 1, -1], "UINT64"))


def test_decode_int_beyond_64_bits() -> None:
    with pytest.raises(InvalidTensor, match=r"input 'x' of datatype INT64 .*outside the range"):
        decode_input(inp([2**70], "INT64"))


def test_decode_huge_float_for_int() -> None:
    with pytest.raises(InvalidTensor, match=r"input 'x' of datatype INT64 .*outside the range"):
        decode_input(inp([1e30, 1], "INT64"))


def test_decode_nan_for_int() -> None:
    with pytest.raises(InvalidTensor, match=r"input 'x' of datatype INT32 .*non-finite"):
        decode_input(inp([math.nan], "INT32"))


@pytest.mark.parametrize(("datatype", "value"), [("FP16", 1e10), ("FP32", 1e300)])
def test_decode_float_overflow(datatype: str, value: float) -> None:
    with pytest.raises(InvalidTensor, match=rf"input 'x' of datatype {datatype} .*outside"):
        decode_input(inp([1.0, value], datatype))


def test_decode_float_keeps_explicit_infinity() -> None:
    out = decode_input(inp([math.inf, 1.0], "FP32"))
    assert isinstance(out, np.ndarray)
    assert out.tolist() == [math.inf, 1.0]


def test_decode_int_beyond_64_bits_into_float_tensor() -> None:
    out = decode_input(inp([2**70, 1], "FP64"))
    assert isinstance(out, np.ndarray)
    assert out.tolist() == [float(2**70), 1.0]


@pytest.mark.parametrize("bad", [0, 1, "true", 1.0])
def test_decode_bool_accepts_only_true_false(bad: Any) -> None:
    with pytest.raises(InvalidTensor) as info:
        decode_input(inp([True, bad], "BOOL", name="mask"))
    message = str(info.value)
    assert "'mask'" in message and "BOOL" in message and "true or false" in message


@pytest.mark.parametrize("datatype", ["INT32", "FP32", "UINT8"])
def test_decode_booleans_in_numeric_tensor(datatype: str) -> None:
    with pytest.raises(InvalidTensor, match=rf"input 'x' of datatype {datatype} .*True \(bool\)"):
        decode_input(inp([True, False], datatype))


def test_decode_dict_element() -> None:
    with pytest.raises(InvalidTensor, match=r"input 'x' of datatype FP32 must hold numbers"):
        decode_input(inp([{"a": 1}], "FP32"))


def test_decode_missing_data() -> None:
    with pytest.raises(InvalidTensor, match=r"input 'x' has no data"):
        decode_input(RequestInput(name="x", shape=[1], datatype="INT32"))


# ---------------------------------------------------------------------------------------------
# decode_input: BYTES


def test_decode_bytes_default_gives_bytes() -> None:
    out = decode_input(inp(["héllo", b"raw\x00"], "BYTES"))
    assert out == ["héllo".encode(), b"raw\x00"]
    assert all(type(item) is bytes for item in out)


def test_decode_bytes_content_type_str_gives_str() -> None:
    out = decode_input(
        inp(["héllo", "héllo".encode()], "BYTES", parameters={"content_type": "str"})
    )
    assert out == ["héllo", "héllo"]
    assert all(type(item) is str for item in out)


def test_decode_bytes_other_content_type_gives_bytes() -> None:
    out = decode_input(inp(["a"], "BYTES", parameters={"content_type": "base64"}))
    assert out == [b"a"]


def test_decode_bytes_nested_is_flat() -> None:
    out = decode_input(
        inp([["a", "b"], ["c", "d"]], "BYTES", shape=[2, 2], parameters={"content_type": "str"})
    )
    assert out == ["a", "b", "c", "d"]


@pytest.mark.parametrize("shape", [[], [1]])
def test_decode_bytes_scalar(shape: list[int]) -> None:
    assert decode_input(inp("only", "BYTES", shape=shape)) == [b"only"]


def test_decode_bytes_rejects_non_strings() -> None:
    with pytest.raises(InvalidTensor) as info:
        decode_input(inp(["a", 3], "BYTES", name="text"))
    assert (
        "'text'" in str(info.value) and "BYTES" in str(info.value) and "3 (int)" in str(info.value)
    )


def test_decode_bytes_rejects_null() -> None:
    with pytest.raises(InvalidTensor, match=r"input 'x' of datatype BYTES .*null"):
        decode_input(inp(["a", None], "BYTES", parameters={"content_type": "str"}))


def test_decode_bytes_str_content_type_rejects_invalid_utf8() -> None:
    with pytest.raises(InvalidTensor, match=r"input 'x' has content_type 'str'.*UTF-8"):
        decode_input(inp([b"\xff"], "BYTES", parameters={"content_type": "str"}))


def test_decode_bytes_rejects_unencodable_str() -> None:
    with pytest.raises(InvalidTensor, match=r"input 'x' of datatype BYTES .*UTF-8"):
        decode_input(inp(["\ud800"], "BYTES"))


# ---------------------------------------------------------------------------------------------
# decode_request


def test_decode_request_maps_names_to_values() -> None:
    req = InferenceRequest(
        inputs=[
            inp([1, 2], "INT32", name="a"),
            inp(["s"], "BYTES", name="b", parameters={"content_type": "str"}),
        ]
    )
    out = decode_request(req)
    assert list(out) == ["a", "b"]
    assert out["a"].dtype == np.int32 and out["a"].tolist() == [1, 2]
    assert out["b"] == ["s"]


def test_decode_request_duplicate_name() -> None:
    req = InferenceRequest(inputs=[inp([1], "INT32", name="a"), inp([2], "INT32", name="a")])
    with pytest.raises(InvalidInput, match=r"input 'a' appears more than once"):
        decode_request(req)


def test_decode_request_empty() -> None:
    assert decode_request(InferenceRequest(inputs=[])) == {}


def test_decode_request_from_json() -> None:
    body = (
        b'{"inputs":[{"name":"m","shape":[2,2],"datatype":"FP32","data":[[1,2],[3,4]]},'
        b'{"name":"t","shape":[1],"datatype":"BYTES","data":["hi"]}]}'
    )
    req = msgspec.json.decode(body, type=InferenceRequest)
    out = decode_request(req)
    assert out["m"].dtype == np.float32 and out["m"].tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert out["t"] == [b"hi"]


def test_decode_request_error_propagates_input_name() -> None:
    req = InferenceRequest(inputs=[inp([1], "INT32", name="ok"), inp([300], "UINT8", name="bad")])
    with pytest.raises(InvalidTensor, match=r"input 'bad'"):
        decode_request(req)


# ---------------------------------------------------------------------------------------------
# encode_output


@pytest.mark.parametrize(
    ("dtype", "datatype"),
    [
        (np.bool_, "BOOL"),
        (np.uint8, "UINT8"),
        (np.uint16, "UINT16"),
        (np.uint32, "UINT32"),
        (np.uint64, "UINT64"),
        (np.int8, "INT8"),
        (np.int16, "INT16"),
        (np.int32, "INT32"),
        (np.int64, "INT64"),
        (np.float16, "FP16"),
        (np.float32, "FP32"),
        (np.float64, "FP64"),
    ],
)
def test_encode_array_datatype_shape_and_flat_data(dtype: Any, datatype: str) -> None:
    arr = np.arange(6).reshape(2, 3).astype(dtype)
    out = encode_output("y", arr)
    assert out.name == "y"
    assert out.datatype == datatype
    assert out.shape == [2, 3]
    assert type(out.shape[0]) is int
    assert out.data == arr.ravel().tolist()
    assert type(out.data) is list
    assert all(type(item) in (bool, int, float) for item in out.data)


def test_encode_big_endian_array() -> None:
    out = encode_output("y", np.array([1, 2], dtype=">i4"))
    assert out.datatype == "INT32" and out.data == [1, 2]


def test_encode_zero_dim_array_has_empty_shape() -> None:
    out = encode_output("y", np.array(3.5))
    assert out.shape == [] and out.datatype == "FP64" and out.data == [3.5]


def test_encode_non_contiguous_array() -> None:
    arr = np.arange(6, dtype=np.int32).reshape(2, 3).T
    out = encode_output("y", arr)
    assert out.shape == [3, 2] and out.data == [0, 3, 1, 4, 2, 5]


@pytest.mark.parametrize(
    "arr",
    [
        np.array([["a", "b"], ["c", "é"]]),
        np.array([[b"a", b"b"], [b"c", "é".encode()]]),
        np.array([["a", b"b"], ["c", "é"]], dtype=object),
    ],
)
def test_encode_text_arrays_as_bytes(arr: np.ndarray) -> None:
    out = encode_output("y", arr)
    assert out.datatype == "BYTES" and out.shape == [2, 2]
    assert out.data == ["a", "b", "c", "é"]
    assert all(type(item) is str for item in out.data)


def test_encode_object_array_of_non_strings() -> None:
    with pytest.raises(UnsupportedRepresentation, match=r"output 'y' .*None|output 'y' .*null"):
        encode_output("y", np.array(["a", None], dtype=object))


def test_encode_complex_array() -> None:
    with pytest.raises(UnsupportedRepresentation, match=r"output 'y' has numpy dtype complex128"):
        encode_output("y", np.array([1 + 2j]))


@pytest.mark.parametrize(
    ("value", "datatype", "data"),
    [
        (np.float32(1.5), "FP32", [1.5]),
        (np.float16(0.5), "FP16", [0.5]),
        (np.int8(-3), "INT8", [-3]),
        (np.uint64(2**64 - 1), "UINT64", [2**64 - 1]),
        (np.bool_(True), "BOOL", [True]),
        (np.str_("s"), "BYTES", ["s"]),
        (np.bytes_(b"b"), "BYTES", ["b"]),
    ],
)
def test_encode_numpy_scalars(value: Any, datatype: str, data: list[Any]) -> None:
    out = encode_output("y", value)
    assert out.datatype == datatype and out.shape == [1] and out.data == data
    assert type(out.data[0]) is type(data[0])


@pytest.mark.parametrize(
    ("value", "datatype", "data"),
    [
        (True, "BOOL", [True]),
        (False, "BOOL", [False]),
        (7, "INT64", [7]),
        (-(2**63), "INT64", [-(2**63)]),
        (2**63, "UINT64", [2**63]),
        (2.5, "FP64", [2.5]),
        ("text", "BYTES", ["text"]),
        ("é".encode(), "BYTES", ["é"]),
    ],
)
def test_encode_python_scalars(value: Any, datatype: str, data: list[Any]) -> None:
    out = encode_output("y", value)
    assert out.datatype == datatype and out.shape == [1] and out.data == data
    assert type(out.data[0]) is type(data[0])


def test_encode_int_beyond_64_bits() -> None:
    with pytest.raises(UnsupportedRepresentation, match=r"output 'y' "):
        encode_output("y", 2**64)


def test_encode_non_utf8_bytes_names_output() -> None:
    with pytest.raises(UnsupportedRepresentation, match=r"output 'blob' .*UTF-8"):
        encode_output("blob", b"\xff\xfe")


def test_encode_non_utf8_bytes_in_list() -> None:
    with pytest.raises(UnsupportedRepresentation, match=r"output 'blob' .*UTF-8"):
        encode_output("blob", [b"ok", b"\xff"])


def test_encode_list_of_strings_and_bytes() -> None:
    out = encode_output("y", ["a", b"b\x00", "é"])
    assert out.datatype == "BYTES" and out.shape == [3]
    assert out.data == ["a", "b\x00", "é"]  # trailing NUL kept


def test_encode_nested_list_of_strings() -> None:
    out = encode_output("y", [["a", "b"], ["c", "d"]])
    assert out.datatype == "BYTES" and out.shape == [2, 2] and out.data == ["a", "b", "c", "d"]


@pytest.mark.parametrize(
    ("value", "datatype", "shape", "data"),
    [
        ([1, 2, 3], "INT64", [3], [1, 2, 3]),
        ([[1.0, 2.0], [3.0, 4.0]], "FP64", [2, 2], [1.0, 2.0, 3.0, 4.0]),
        ([True, False], "BOOL", [2], [True, False]),
        ((1, 2), "INT64", [2], [1, 2]),
        ([np.float32(1), np.float32(2)], "FP32", [2], [1.0, 2.0]),
        ([], "FP64", [0], []),
    ],
)
def test_encode_numeric_lists(value: Any, datatype: str, shape: list[int], data: Any) -> None:
    out = encode_output("y", value)
    assert (out.datatype, out.shape, out.data) == (datatype, shape, data)


def test_encode_ragged_list() -> None:
    with pytest.raises(UnsupportedRepresentation, match=r"output 'y' is a ragged nested list"):
        encode_output("y", [[1, 2], [3]])


def test_encode_list_mixing_numbers_and_strings() -> None:
    with pytest.raises(UnsupportedRepresentation, match=r"output 'y' has element 1 \(int\)"):
        encode_output("y", ["a", 1])


def test_encode_list_with_none() -> None:
    with pytest.raises(UnsupportedRepresentation, match=r"output 'y' has element null"):
        encode_output("y", [None, None])


def test_encode_list_of_huge_ints() -> None:
    with pytest.raises(UnsupportedRepresentation, match=r"output 'y' holds integers"):
        encode_output("y", [2**70, 1])


def test_encode_response_output_is_unchanged() -> None:
    original = ResponseOutput(name="z", shape=[1], datatype="INT32", data=[1])
    assert encode_output("y", original) is original


@pytest.mark.parametrize(
    ("value", "type_name"), [({"a": 1}, "dict"), (None, "NoneType"), (object(), "object")]
)
def test_encode_unsupported_values_name_output_and_type(value: Any, type_name: str) -> None:
    with pytest.raises(UnsupportedRepresentation) as info:
        encode_output("result", value)
    assert "'result'" in str(info.value) and type_name in str(info.value)


def test_encode_output_serialises_with_msgspec() -> None:
    out = encode_output("y", np.array([[1, 2]], dtype=np.uint8))
    assert msgspec.json.decode(msgspec.json.encode(out)) == {
        "name": "y",
        "shape": [1, 2],
        "datatype": "UINT8",
        "data": [1, 2],
    }


# ---------------------------------------------------------------------------------------------
# encode_outputs


def test_encode_outputs_from_inference_response() -> None:
    outs = [ResponseOutput(name="a", shape=[1], datatype="INT64", data=[1])]
    assert encode_outputs(InferenceResponse(outputs=outs)) == outs


@pytest.mark.parametrize("container", [list, tuple])
def test_encode_outputs_from_response_output_sequence(container: Any) -> None:
    a = ResponseOutput(name="a", shape=[1], datatype="INT64", data=[1])
    b = ResponseOutput(name="b", shape=[1], datatype="INT64", data=[2])
    result = encode_outputs(container([a, b]))
    assert type(result) is list and result == [a, b]


def test_encode_outputs_from_dict() -> None:
    result = encode_outputs({"a": np.array([1.0], dtype=np.float32), "b": "s"})
    assert [(o.name, o.datatype, o.data) for o in result] == [
        ("a", "FP32", [1.0]),
        ("b", "BYTES", ["s"]),
    ]


def test_encode_outputs_dict_with_non_string_key() -> None:
    with pytest.raises(UnsupportedRepresentation, match=r"output names must be strings.*1 \(int\)"):
        encode_outputs({1: 2})


def test_encode_outputs_single_value_is_named_output() -> None:
    result = encode_outputs(np.zeros((2, 2), dtype=np.int16))
    assert len(result) == 1
    assert (result[0].name, result[0].shape, result[0].datatype) == ("output", [2, 2], "INT16")


def test_encode_outputs_list_of_numbers_is_one_output() -> None:
    result = encode_outputs([1, 2, 3])
    assert [(o.name, o.shape) for o in result] == [("output", [3])]


def test_encode_outputs_single_unsupported_value_names_output() -> None:
    with pytest.raises(UnsupportedRepresentation, match=r"output 'output'"):
        encode_outputs(None)


def test_encode_outputs_requested_filters_and_orders() -> None:
    result = encode_outputs(
        {"a": 1, "b": 2, "c": 3}, [RequestOutput(name="c"), RequestOutput(name="a")]
    )
    assert [o.name for o in result] == ["c", "a"]
    assert [o.data for o in result] == [[3], [1]]


def test_encode_outputs_requested_duplicate_returned_once() -> None:
    result = encode_outputs({"a": 1, "b": 2}, [RequestOutput(name="b"), RequestOutput(name="b")])
    assert [o.name for o in result] == ["b"]


@pytest.mark.parametrize("requested", [None, []])
def test_encode_outputs_no_request_keeps_all(requested: Any) -> None:
    assert [o.name for o in encode_outputs({"a": 1, "b": 2}, requested)] == ["a", "b"]


def test_encode_outputs_requested_missing() -> None:
    with pytest.raises(InvalidInput) as info:
        encode_outputs({"a": 1, "b": 2}, [RequestOutput(name="a"), RequestOutput(name="y")])
    assert str(info.value) == (
        "requested output 'y' is not produced by the model; it produced: a, b"
    )


def test_encode_outputs_requested_applies_to_inference_response() -> None:
    response = InferenceResponse(
        outputs=[
            ResponseOutput(name="a", shape=[1], datatype="INT64", data=[1]),
            ResponseOutput(name="b", shape=[1], datatype="INT64", data=[2]),
        ]
    )
    result = encode_outputs(response, [RequestOutput(name="b")])
    assert [o.name for o in result] == ["b"]


# ---------------------------------------------------------------------------------------------
# inputs_as_json


def test_inputs_as_json() -> None:
    view = inputs_as_json(
        {
            "matrix": np.array([[1, 2], [3, 4]], dtype=np.int32),
            "scalar": np.array([2.5], dtype=np.float32),
            "nested_one": np.array([[7]], dtype=np.int64),
            "empty": np.zeros((0,), dtype=np.float32),
            "one_text": ["hello"],
            "one_blob": [b"raw"],
            "texts": ["a", "b"],
            "other": {"k": 1},
        }
    )
    assert view == {
        "matrix": [[1, 2], [3, 4]],
        "scalar": 2.5,
        "nested_one": 7,
        "empty": [],
        "one_text": "hello",
        "one_blob": b"raw",
        "texts": ["a", "b"],
        "other": {"k": 1},
    }
    assert type(view["scalar"]) is float and type(view["nested_one"]) is int
    assert type(view["matrix"][0][0]) is int


def test_inputs_as_json_of_decoded_request() -> None:
    decoded = decode_request(
        InferenceRequest(
            inputs=[
                inp([3], "INT32", name="n"),
                inp(["q"], "BYTES", name="q", parameters={"content_type": "str"}),
            ]
        )
    )
    assert inputs_as_json(decoded) == {"n": 3, "q": "q"}


# ---------------------------------------------------------------------------------------------
# json_default


def test_json_default_with_msgspec_encoder() -> None:
    encoder = msgspec.json.Encoder(enc_hook=json_default)
    result = {
        "array": np.array([[1, 2], [3, 4]], dtype=np.int8),
        "floats": np.array([0.5], dtype=np.float32),
        "f32": np.float32(1.5),
        "i64": np.int64(7),
        "flag": np.bool_(True),
        "text": np.str_("s"),
        "blobs": np.array([b"ab", b"cd"]),
        "objects": np.array([b"x", "y"], dtype=object),
        "list": [np.float64(2.5), np.uint8(3)],
    }
    assert msgspec.json.decode(encoder.encode(result)) == {
        "array": [[1, 2], [3, 4]],
        "floats": [0.5],
        "f32": 1.5,
        "i64": 7,
        "flag": True,
        "text": "s",
        "blobs": ["ab", "cd"],
        "objects": ["x", "y"],
        "list": [2.5, 3],
    }


def test_json_default_direct_conversions() -> None:
    assert json_default(b"abc") == "abc"
    assert json_default(bytearray(b"abc")) == "abc"
    assert json_default(np.bytes_(b"z")) == "z"
    assert sorted(json_default({1, 2})) == [1, 2]
    assert json_default((1, 2)) == [1, 2]
    assert json_default(np.float32(0.5)) == 0.5 and type(json_default(np.float32(0.5))) is float


def test_json_default_rejects_non_utf8_bytes() -> None:
    with pytest.raises(UnsupportedRepresentation, match=r"not valid UTF-8"):
        json_default(b"\xff")
    encoder = msgspec.json.Encoder(enc_hook=json_default)
    with pytest.raises(UnsupportedRepresentation):
        encoder.encode({"a": np.array([b"\xff"])})


def test_json_default_unknown_type_raises_type_error() -> None:
    class Thing:
        pass

    with pytest.raises(TypeError, match=r"Thing"):
        json_default(Thing())
    with pytest.raises(TypeError):
        msgspec.json.Encoder(enc_hook=json_default).encode({"a": Thing()})
    with pytest.raises(TypeError):
        msgspec.json.Encoder(enc_hook=json_default).encode(np.array([1 + 2j]))


# ---------------------------------------------------------------------------------------------
# concat_outputs


def _out(name: str, shape: list[int], data: Any, datatype: str = "INT64") -> ResponseOutput:
    return ResponseOutput(name=name, shape=shape, datatype=datatype, data=data)


def test_concat_outputs_joins_along_first_axis_in_first_appearance_order() -> None:
    parts = [
        [_out("tokens", [1, 2], [1, 2]), _out("score", [1], [0.5], "FP64")],
        [_out("extra", [1], [9]), _out("tokens", [2, 2], [3, 4, 5, 6])],
        [_out("score", [2], [0.25, 0.75], "FP64")],
    ]
    result = concat_outputs(parts)
    assert [(o.name, o.shape, o.data) for o in result] == [
        ("tokens", [3, 2], [1, 2, 3, 4, 5, 6]),
        ("score", [3], [0.5, 0.25, 0.75]),
        ("extra", [1], [9]),
    ]


def test_concat_outputs_of_encoded_items() -> None:
    parts = [encode_outputs({"t": "a"}), encode_outputs({"t": "b"}), encode_outputs({"t": "c"})]
    (result,) = concat_outputs(parts)
    assert (result.datatype, result.shape, result.data) == ("BYTES", [3], ["a", "b", "c"])


def test_concat_outputs_does_not_modify_inputs() -> None:
    first = _out("a", [1], [1])
    second = _out("a", [1], [2])
    concat_outputs([[first], [second]])
    assert (first.shape, first.data) == ([1], [1])
    assert (second.shape, second.data) == ([1], [2])


def test_concat_outputs_scalars_count_as_one_row() -> None:
    (result,) = concat_outputs([[_out("a", [], [1])], [_out("a", [], [2])]])
    assert (result.shape, result.data) == ([2], [1, 2])


def test_concat_outputs_flattens_nested_data() -> None:
    (result,) = concat_outputs([[_out("a", [1, 2], [[1, 2]])], [_out("a", [1, 2], [[3, 4]])]])
    assert (result.shape, result.data) == ([2, 2], [1, 2, 3, 4])


def test_concat_outputs_mismatched_inner_dims() -> None:
    with pytest.raises(UnsupportedRepresentation, match=r"output 'a' changes shape"):
        concat_outputs([[_out("a", [1, 2], [1, 2])], [_out("a", [1, 3], [1, 2, 3])]])


def test_concat_outputs_mismatched_datatype() -> None:
    with pytest.raises(UnsupportedRepresentation, match=r"output 'a' changes datatype"):
        concat_outputs([[_out("a", [1], [1])], [_out("a", [1], [1.0], "FP64")]])


def test_concat_outputs_empty() -> None:
    assert concat_outputs([]) == []
    assert concat_outputs([[], []]) == []


def test_concat_single_part_is_equal_copy() -> None:
    original = _out("a", [2], [1, 2])
    (result,) = concat_outputs([[original]])
    assert result == original and result is not original
