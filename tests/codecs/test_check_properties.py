"""Property tests of checking without decoding (issue 12, item 5): a model that takes the request
itself must get only tensors a decoding model would get, so :func:`codecs.check_input` raises
exactly when :func:`codecs.decode_input` raises, with the same error, for anything a client
sends (any datatype, shape, data, parameters); and :func:`codecs.check_request` as
:func:`codecs.decode_request` for whole requests (duplicate names included)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from tensor_strategies import (
    FIXED,
    any_datatypes,
    any_shapes,
    awkward_numbers,
    json_values,
    nest,
    shapes,
    texts,
)

from podium import codecs
from podium.errors import InvalidInput
from podium.types import InferenceRequest, RequestInput

parameters = st.one_of(
    st.none(),
    st.just({"content_type": "str"}),
    st.dictionaries(texts, json_values, max_size=2),
)


def outcome(call: Any, value: Any) -> tuple[str, str] | None:
    """None when ``call(value)`` passes, else the error's class and message."""
    try:
        call(value)
    except InvalidInput as exc:
        return type(exc).__name__, exc.message
    return None


def same_verdict(inp: RequestInput) -> None:
    assert outcome(codecs.check_input, inp) == outcome(codecs.decode_input, inp)


@given(any_shapes, any_datatypes, json_values, parameters)
@example([2], "FP32", {"a": 1}, None)
@example([2**62], "FP32", [1.0, 2.0], None)
@example([2], "FP32", [1.0, 2.0, 3.0], None)
@example([2], "INT322", [1, 2], None)
@example([1], "FP16", [65519.0], None)  # rounds to the largest float16: accepted
@example([1], "FP16", [65520.0], None)  # rounds to infinity: refused
@example([2], "FP32", [1e39, float("inf")], None)
@example([2], "FP32", [float("nan"), 1e39], None)
@example([1], "BYTES", [b"\xff"], {"content_type": "str"})
@example([1], "BYTES", ["\ud800"], None)
def test_checking_refuses_exactly_what_decoding_refuses(
    shape: Any, datatype: Any, data: Any, params: Any
) -> None:
    same_verdict(
        RequestInput(name="x", shape=shape, datatype=datatype, parameters=params, data=data)
    )


@st.composite
def right_count(draw: st.DrawFn) -> tuple[list[int], Any]:
    shape = draw(shapes(max_side=3))
    flat = draw(st.lists(awkward_numbers, min_size=math.prod(shape), max_size=math.prod(shape)))
    return shape, nest(flat, shape) if draw(st.booleans()) else flat


@given(right_count(), st.sampled_from([*FIXED, "BYTES"]), parameters)
@example(([2], [2**63, -1]), "UINT64", None)
@example(([70], list(range(70))), "INT8", None)  # past the small-list path, numpy's bounds
@example(([70], [*range(69), 1e39]), "FP32", None)
def test_checking_data_of_the_right_count(
    case: tuple[list[int], Any], datatype: str, params: Any
) -> None:
    shape, data = case
    same_verdict(
        RequestInput(name="x", shape=shape, datatype=datatype, parameters=params, data=data)
    )


# The flat lists of Python numbers that checking passes without numpy (codecs/_inputs.py, _FLAT
# and check_input), at the edges of that path: each must get decoding's verdict.
_FLAT_EDGES = [
    ("FP32", [1, 2, 3, 4]),
    ("FP32", [1.0, float("nan")] * 40),  # NaN past the small-list path: passes
    ("FP32", [float("nan"), 1e39]),
    ("FP32", [3.4028234663852886e38, -3.4028234663852886e38]),
    ("FP32", [3.4028235e38]),  # above the largest float32, rounds to it: passes
    ("FP32", [2**70, 1.5]),
    ("FP32", [10**39]),
    ("FP64", [10**400]),
    ("FP64", [10**300, 0.5]),
    ("FP16", [65504, -65504.0]),
    ("FP16", [65519.0]),
    ("FP16", [65520.0]),
    ("BF16", [1.5, 2]),
    ("FP32", [True, 1.0]),
    ("INT8", [127, -128]),
    ("INT8", [128]),
    ("INT8", [1.0, 2]),
    ("INT8", [True, 1]),
    ("INT64", [2**63 - 1, -(2**63)]),
    ("INT64", [2**63]),
    ("UINT64", [2**64 - 1, 0]),
    ("UINT64", [2**64]),
    ("UINT64", [-1]),
    ("UINT64", [2**63, 1]),  # past msgspec's int64 bounds: numpy's verdict
    ("UINT32", [2**32 - 1, 0]),
    ("UINT32", [2**32]),
    ("FP32", [float("inf"), 1.0]),  # infinite: passes, as numpy judges it
    ("FP32", [1, float("nan")]),
    ("FP16", [1, 2**64]),
    ("UINT8", list(range(256))),
    ("BOOL", [True, False]),
    ("BOOL", [True, 1]),
    ("BOOL", [1, 0]),
    ("INT32", ["1", 2]),
    ("FP32", [None, 1.0]),
    ("FP32", [[1.0], 2.0]),
]


@pytest.mark.parametrize(("datatype", "data"), _FLAT_EDGES)
def test_a_flat_list_of_numbers_gets_decodings_verdict(datatype: str, data: list[Any]) -> None:
    same_verdict(RequestInput(name="x", shape=[len(data)], datatype=datatype, data=data))


def test_a_request_is_checked_as_it_is_decoded() -> None:
    ok = RequestInput(name="a", shape=[2], datatype="INT32", data=[1, 2])
    bad = RequestInput(name="b", shape=[2], datatype="INT32", data=[1, 2, 3])
    for inputs in ([ok], [ok, bad], [ok, ok], [bad, bad], []):
        request = InferenceRequest(inputs=inputs)
        assert outcome(codecs.check_request, request) == outcome(codecs.decode_request, request)
    with pytest.raises(InvalidInput, match="input 'a' appears more than once"):
        codecs.check_request(InferenceRequest(inputs=[ok, ok]))


# The one pass that checks a plain input (codecs/_inputs.py, _PLAIN) decodes it straight into
# the datatype's dtype; the general path reads it with numpy, judges that, then casts. Both must
# give the same array (dtype, shape and every element's bits) or the same error.
_PLAIN_EDGES = [
    ("FP32", [2**53, -(2**53)]),  # the largest ints the one pass takes for a float datatype
    ("FP32", [2**53 + 1, 1]),  # past them: the general path's int64 reading, one rounding
    ("FP32", [2**60 + 2**36 + 1]),  # where reading it through float64 would round twice
    ("FP64", [2**53, 0.5]),
    ("FP64", [1e308, -1e308]),
    ("FP64", [float("inf")]),
    ("FP16", [65504, 1.0]),
    ("BF16", [3.4e38, 1]),
    ("INT64", [2**63 - 1, -(2**63)]),
    ("UINT64", [2**63 - 1]),
    ("BOOL", [True] * 100),  # BOOL is plain at any length
    ("INT8", list(range(-64, 64))),  # past _SMALL: the general path
]


def same_decoding(inp: RequestInput) -> None:
    from podium.codecs._inputs import _decoded

    verdict = outcome(codecs.decode_input, inp)
    assert verdict == outcome(_decoded, inp)
    if verdict is None:
        plain, general = codecs.decode_input(inp), _decoded(inp)
        assert isinstance(plain, np.ndarray) and isinstance(general, np.ndarray)
        assert plain.dtype == general.dtype and plain.shape == general.shape
        assert plain.tobytes() == general.tobytes()


@pytest.mark.parametrize(("datatype", "data"), _FLAT_EDGES + _PLAIN_EDGES)
def test_the_one_pass_decodes_as_the_general_path(datatype: str, data: list[Any]) -> None:
    same_decoding(RequestInput(name="x", shape=[len(data)], datatype=datatype, data=data))
    same_verdict(RequestInput(name="x", shape=[len(data)], datatype=datatype, data=data))


@given(right_count(), st.sampled_from(FIXED))
@example(([1, 2], [2**53, 1.5]), "FP16")
@example(([2, 1], [-(2**53), 2**53]), "FP32")
def test_any_flat_numbers_decode_as_the_general_path(
    case: tuple[list[int], Any], datatype: str
) -> None:
    shape, data = case
    same_decoding(RequestInput(name="x", shape=shape, datatype=datatype, data=data))
