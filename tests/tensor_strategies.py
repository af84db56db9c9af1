"""Hypothesis strategies for OIP tensors, shared by the property tests of the codecs and of the
gRPC tensors: shapes (0-size dimensions included), numpy arrays of every datatype drawn from
their raw bits (so every NaN payload, signalling ones too, and -0.0 turn up), JSON-like values,
and the absurd shapes and datatypes a client may send."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from podium.types import DATATYPES

#: The numpy dtype a datatype decodes to (BF16: float32 holding a bfloat16's bits).
DTYPES: dict[str, np.dtype[Any]] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BF16": np.dtype(np.float32),
}

#: Every datatype with fixed-size elements (all but BYTES), in a stable order.
FIXED = sorted(DTYPES)

#: The bytes per element on the wire.
ITEMSIZE = {dt: (2 if dt == "BF16" else DTYPES[dt].itemsize) for dt in FIXED}

_UNSIGNED_OF_SIZE = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}

#: Shapes of at most this many elements keep each example cheap.
MAX_ELEMENTS = 64


@st.composite
def shapes(draw: st.DrawFn, max_dims: int = 4, max_side: int = 5) -> list[int]:
    """Tensor shapes: scalars ``[]``, 0-size dimensions, at most :data:`MAX_ELEMENTS` elements."""
    shape: list[int] = []
    room = MAX_ELEMENTS  # how large the next side may be, so that the product stays in bounds
    for _ in range(draw(st.integers(min_value=0, max_value=max_dims))):
        side = draw(st.integers(min_value=0, max_value=min(max_side, room)))
        shape.append(side)
        room = room // side if side else MAX_ELEMENTS  # after a 0, anything stays empty
    return shape


@st.composite
def shapes_of(draw: st.DrawFn, count: int) -> list[int]:
    """Shapes of exactly ``count`` elements: ``[count]``, its factorings, ``[]`` for one, and
    for none any shape with a 0 in it."""
    if count == 0:
        shape = draw(shapes(max_dims=3))
        return draw(st.permutations([*shape, 0]))
    if count == 1 and draw(st.booleans()):
        return []
    shape: list[int] = []
    rest = count
    for _ in range(draw(st.integers(min_value=0, max_value=2))):
        side = draw(st.sampled_from([d for d in range(1, rest + 1) if rest % d == 0]))
        shape.append(side)
        rest //= side
    return draw(st.permutations([*shape, rest]))


def bits(arr: np.ndarray) -> np.ndarray:
    """``arr``'s elements as unsigned integers of the same size: equal bits, not equal values
    (NaN equals NaN of the same payload, -0.0 differs from 0.0)."""
    return arr.view(_UNSIGNED_OF_SIZE[arr.dtype.itemsize])


@st.composite
def arrays(
    draw: st.DrawFn, datatype: str, shape: list[int] | None = None, finite: bool = False
) -> np.ndarray:
    """An array of ``datatype``'s decoded dtype drawn from random bits: every float, NaN payloads
    (signalling ones too), infinities and -0.0 included unless ``finite``. ``BF16`` gives float32
    whose low 16 bits are zero (the values a bfloat16 can hold)."""
    if shape is None:
        shape = draw(shapes())
    if datatype == "BOOL":
        return draw(hnp.arrays(np.bool_, tuple(shape)))
    dtype = DTYPES[datatype]
    if dtype.kind in "iu":
        return draw(hnp.arrays(dtype, tuple(shape)))
    size = 2 if datatype == "BF16" else dtype.itemsize
    raw = draw(hnp.arrays(_UNSIGNED_OF_SIZE[size], tuple(shape)))
    if datatype == "BF16":
        values = (raw.astype(np.uint32) << np.uint32(16)).view(np.float32)  # uint32 on numpy 1 too
    else:
        values = raw.view(dtype)
    if finite:
        # Non-finite values become a finite value with the same low bits, so nothing is lost
        # from the spread of the draw.
        values = np.where(np.isfinite(values), values, values.dtype.type(1.5))
    return np.asarray(values)  # arithmetic on a 0-d array gives a numpy scalar


def datatypes_and_arrays(finite: bool = False) -> st.SearchStrategy[tuple[str, np.ndarray]]:
    """``(datatype, array)`` for every fixed-size datatype."""
    return st.sampled_from(FIXED).flatmap(
        lambda dt: st.tuples(st.just(dt), arrays(dt, finite=finite))
    )


def nest(flat: list[Any], shape: list[int]) -> Any:
    """``flat`` (row-major) as nested lists of ``shape``; a scalar shape gives a 1-element list."""
    if not shape:
        return list(flat)
    if len(shape) == 1:
        return list(flat)
    step = math.prod(shape[1:])
    return [nest(flat[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]


#: Text that UTF-8 can encode (no lone surrogates), as JSON strings carry.
texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)

#: JSON scalars as ``msgspec`` decodes them, and some Python values a caller may pass.
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([-(2**63) - 1, -(2**63), 2**63 - 1, 2**63, 2**64 - 1, 2**64]),
    st.floats(),
    texts,
)

#: Any JSON value: scalars, arrays and objects, nested a few levels.
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(texts, inner, max_size=3)),
    max_leaves=20,
)

#: Numbers near and beyond every datatype's range, for data of the right shape but wrong values.
awkward_numbers = st.one_of(
    st.integers(min_value=-(2**66), max_value=2**66),
    st.sampled_from([2**8, 2**15, 2**16, 2**31, 2**32, 2**53 + 1, 2**63, 2**64, -1, -(2**63) - 1]),
    st.floats(),
    st.booleans(),
    texts,
    st.none(),
)

#: Datatypes a client may send: every OIP datatype, near misses and nonsense.
any_datatypes = st.one_of(
    st.sampled_from(sorted(DATATYPES)),
    st.sampled_from(["fp32", "FLOAT32", "TYPE_FP32", "STRING", "", "BYTES ", "BF16\x00"]),
    texts,
)

#: Shapes a client may send: sensible ones, negative and absurd dimensions (beyond what any
#: array can hold, or beyond 64 bits), and shapes that are not lists of integers.
any_shapes = st.one_of(
    shapes(),
    st.lists(st.integers(min_value=-(2**64), max_value=2**64 + 1), max_size=4),
    st.lists(st.sampled_from([0, 1, 2**31, 2**32, 2**62, 2**63 - 1, 2**63, 2**64 - 1]), max_size=4),
    st.lists(json_scalars, max_size=3),
    json_scalars,
)
