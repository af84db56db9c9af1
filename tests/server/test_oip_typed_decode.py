"""The OIP REST body decoded with each input typed by its datatype (issue 26, ``codecs.TypedRequest``
and ``_oip.parse_request``): a plain numeric input is checked while it is decoded and comes out as
a ``codecs.CheckedInput``; everything else comes out as the generic decode gives it, and every
body gets exactly the generic decode's and checks' verdict (each 400 and its message), and the
same decoded values."""

from __future__ import annotations

import math
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tensor_strategies import FIXED, any_datatypes, any_shapes, awkward_numbers, json_values, nest

from podium import codecs
from podium.errors import InvalidInput
from podium.server.http import _oip
from podium.types import InferenceRequest, RequestInput

_generic = msgspec.json.Decoder(InferenceRequest)


def generic(body: bytes) -> InferenceRequest:
    """The body as it was parsed before typed decoding (the fallback, on its own)."""
    request: InferenceRequest = _oip.decode_as(_generic, body, "inference request")
    return request


def verdict(parse: Any, body: bytes, then: Any) -> tuple[str, str] | Any:
    """The error's class and message, or what ``then`` makes of the parsed request."""
    try:
        return then(parse(body))
    except InvalidInput as exc:
        return type(exc).__name__, exc.message


def decoded(request: InferenceRequest) -> dict[str, Any]:
    """``decode_request``'s values, numpy arrays as (dtype, shape, bytes) to compare them."""
    values = codecs.decode_request(request)
    return {
        name: (v.dtype.str, v.shape, v.tobytes()) if isinstance(v, np.ndarray) else v
        for name, v in values.items()
    }


def agrees(body: bytes) -> None:
    assert verdict(_oip.parse_request, body, codecs.check_request) == verdict(
        generic, body, codecs.check_request
    )
    assert verdict(_oip.parse_request, body, decoded) == verdict(generic, body, decoded)
    try:
        request = _oip.parse_request(body)
    except InvalidInput:
        return
    for inp in request.inputs:
        if type(inp) is codecs.CheckedInput:  # only what the general checks pass
            codecs.check_input(RequestInput(**msgspec.structs.asdict(inp)))


def body_of(inputs: list[dict[str, Any]]) -> bytes | None:
    try:
        return msgspec.json.encode({"inputs": inputs})
    except (TypeError, OverflowError, UnicodeEncodeError):
        return None


@given(any_shapes, any_datatypes, json_values)
def test_any_input_gets_the_generic_verdict(shape: Any, datatype: Any, data: Any) -> None:
    body = body_of([{"name": "x", "shape": shape, "datatype": datatype, "data": data}])
    if body is not None:
        agrees(body)


@st.composite
def right_count(draw: st.DrawFn) -> tuple[list[int], Any]:
    shape = draw(st.lists(st.integers(0, 3), max_size=3))
    flat = draw(st.lists(awkward_numbers, min_size=math.prod(shape), max_size=math.prod(shape)))
    return shape, nest(flat, shape) if draw(st.booleans()) else flat


@given(right_count(), st.sampled_from([*FIXED, "BYTES"]))
def test_numbers_of_the_right_count_decode_as_the_generic_path(
    case: tuple[list[int], Any], datatype: str
) -> None:
    shape, data = case
    body = body_of([{"name": "x", "shape": shape, "datatype": datatype, "data": data}])
    if body is not None:
        agrees(body)


_BODIES = [
    b"",
    b"{",
    b"[]",
    b'{"inputs": []}',
    b'{"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}',
    b'{"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3]}]}',
    b'{"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [1, [2]]}]}',
    b'{"inputs": [{"name": "x", "shape": [2, 1], "datatype": "INT8", "data": [[1], [2]]}]}',
    b'{"inputs": [{"name": "x", "shape": [1], "datatype": "INT8", "data": [128]}]}',
    b'{"inputs": [{"name": "x", "shape": [1], "datatype": "INT8", "data": [1.0]}]}',
    b'{"inputs": [{"name": "x", "shape": [1], "datatype": "INT8", "data": 1}]}',
    b'{"inputs": [{"name": "x", "shape": [1], "datatype": "BOOL", "data": true}]}',
    b'{"inputs": [{"name": "x", "shape": [-1], "datatype": "FP32", "data": [1]}]}',
    b'{"inputs": [{"name": "x", "shape": [1], "datatype": "FP33", "data": [1]}]}',
    b'{"inputs": [{"name": "x", "shape": [1], "datatype": 3, "data": [1]}]}',
    b'{"inputs": [{"name": "x", "shape": [1], "data": [1]}]}',
    b'{"inputs": [{"shape": [1], "datatype": "FP32", "data": [1]}]}',
    b'{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32"}]}',
    b'{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": {"a": 1}}]}',
    b'{"inputs": [{"name": "x", "shape": [1], "datatype": "BYTES", "data": ["a"]}]}',
    b'{"inputs": [{"name": "x", "shape": [1], "datatype": "UINT64", "data": [18446744073709551615]}]}',
    b'{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [9007199254740993]}]}',
    b'{"inputs": [{"name": "x", "shape": [100], "datatype": "FP32", "data": ['
    + b", ".join(b"%d.5" % i for i in range(100))
    + b"]}]}",
    b'{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]},'
    b' {"name": "x", "shape": [1], "datatype": "FP32", "data": [2]}]}',
    b'{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}], "id": 3}',
    b'{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}], "id": "a",'
    b' "parameters": {"p": 1}, "outputs": [{"name": "y"}]}',
]


@pytest.mark.parametrize("body", _BODIES)
def test_edge_bodies_get_the_generic_verdict(body: bytes) -> None:
    agrees(body)


def test_a_plain_input_is_checked_while_decoded_and_the_rest_as_it_comes() -> None:
    body = (
        b'{"id": "r", "inputs": ['
        b'{"name": "a", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4.5]},'
        b'{"name": "b", "shape": [1], "datatype": "INT8", "data": 1},'
        b'{"name": "c", "shape": [1], "datatype": "BYTES", "data": ["hi"],'
        b' "parameters": {"content_type": "str"}}]}'
    )
    request = _oip.parse_request(body)
    # what a model that takes the request gets: the documented type itself, not a subclass
    assert type(request) is InferenceRequest and request.id == "r"
    a, b, c = request.inputs
    assert type(a) is codecs.CheckedInput and a.datatype == "FP32" and a.data == [1, 2, 3, 4.5]
    assert type(b) is RequestInput and b.datatype == "INT8" and b.data == 1
    assert type(c) is RequestInput and c.parameters == {"content_type": "str"}
    # the same JSON out as in
    assert msgspec.to_builtins(request) == msgspec.to_builtins(generic(body))


def test_a_nested_list_is_decoded_the_generic_way() -> None:
    request = _oip.parse_request(
        b'{"inputs": [{"name": "a", "shape": [1], "datatype": "FP32", "data": [1]},'
        b' {"name": "b", "shape": [2, 1], "datatype": "INT8", "data": [[1], [2]]}]}'
    )
    assert type(request) is InferenceRequest
    assert [type(inp) for inp in request.inputs] == [RequestInput, RequestInput]
