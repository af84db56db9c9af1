"""Request tensors to Python values: :func:`decode_input` and :func:`decode_request`, and the
JSON view of decoded inputs that a model's schema is checked against."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from podium.errors import InvalidInput, InvalidTensor
from podium.types import DATATYPES, InferenceRequest, RequestInput

from ._bytes import decode_bytes
from ._datatypes import NUMPY_DTYPES
from ._shape import (
    check_shape,
    count_error,
    describe,
    element_count,
    leaves_of,
    ragged_error,
    unknown_datatype,
)

__all__ = ["decode_input", "decode_request", "inputs_as_json"]


# Beyond this magnitude float64 cannot hold every integer, so numpy may have rounded the ints.
_EXACT_IN_FLOAT64 = 2**53


def decode_input(inp: RequestInput) -> np.ndarray | list[str] | list[bytes]:
    """Decode one OIP input tensor.

    Numeric datatypes give a numpy array of exactly that dtype, reshaped to ``inp.shape``
    (``BF16`` gives ``float32``). ``data`` may be flat or nested in row-major order, or a bare
    scalar when the tensor has one element. ``BYTES`` gives a flat list whatever the shape:
    ``list[str]`` when ``inp.parameters`` has ``content_type == "str"``, else ``list[bytes]``
    (strings are UTF-8 encoded).

    ``data`` may also be what :func:`decode_raw` produced: a numpy array (used as it is, without
    a copy, when its dtype is the datatype's) or a ``list[bytes]`` for ``BYTES``.

    Raises :class:`InvalidTensor`, naming the input, for an unknown datatype, a malformed shape,
    ragged data, an element count that disagrees with the shape, or an element that the datatype
    cannot hold (wrong type, non-integral or out of range).
    """
    name = inp.name
    datatype = inp.datatype
    if not isinstance(datatype, str) or datatype not in DATATYPES:
        raise unknown_datatype(name, datatype)
    shape = check_shape(name, inp.shape)
    count = element_count(name, shape)
    if inp.data is None:
        raise InvalidTensor(f"input '{name}' has no data")
    if datatype == "BYTES":
        return decode_bytes(inp, shape, count)
    data = inp.data
    if isinstance(data, np.ndarray) and data.dtype == NUMPY_DTYPES[datatype] and data.size == count:
        # Already decoded (decode_raw, or a model's own request): nothing to check or copy.
        return data.reshape(shape)
    return _decode_numeric(name, datatype, data, shape, count)


def decode_request(req: InferenceRequest) -> dict[str, Any]:
    """Decode every input of ``req`` into ``{name: value}`` (see :func:`decode_input`).

    An input name given twice raises :class:`InvalidInput`; a request with no inputs gives ``{}``.
    """
    decoded: dict[str, Any] = {}
    for inp in req.inputs:
        if inp.name in decoded:
            raise InvalidInput(f"input '{inp.name}' appears more than once in the request")
        decoded[inp.name] = decode_input(inp)
    return decoded


def _decode_numeric(
    name: str, datatype: str, data: Any, shape: list[int], count: int
) -> np.ndarray:
    target = NUMPY_DTYPES[datatype]
    # Let numpy parse the whole (possibly nested) list at C speed, then judge the dtype it
    # inferred; per-element Python checks run only on the rare paths below.
    try:
        arr = np.asarray(data)
    except ValueError as exc:
        raise ragged_error(name) from exc
    if arr.size != count:
        raise count_error(name, shape, count, arr.size)
    if count == 0:
        return np.zeros(shape, dtype=target)
    if datatype == "BOOL":
        if arr.dtype.kind != "b":
            raise _bad_element(name, datatype, data, arr)
        out = arr
    elif target.kind in "iu":
        out = _to_integers(name, datatype, data, arr, target)
    else:
        out = _to_floats(name, datatype, data, arr, target)
    return out.astype(target, copy=False).reshape(shape)


def _to_integers(
    name: str, datatype: str, data: Any, arr: np.ndarray, target: np.dtype[Any]
) -> np.ndarray:
    kind = arr.dtype.kind
    if kind in "iu":
        if not np.can_cast(arr.dtype, target, "safe"):
            _check_int_range(name, datatype, arr.min().item(), arr.max().item(), target)
        return arr
    if kind == "f":
        finite = np.isfinite(arr)
        if not finite.all():
            bad = arr[~finite][0].item()
            raise InvalidTensor(
                f"input '{name}' of datatype {datatype} has non-finite element {bad!r}"
            )
        fractional = arr != np.trunc(arr)
        if fractional.any():
            bad = arr[fractional][0].item()
            raise InvalidTensor(
                f"input '{name}' of datatype {datatype} has non-integral element {bad!r}"
            )
        low, high = arr.min().item(), arr.max().item()
        if max(abs(low), abs(high)) >= _EXACT_IN_FLOAT64:
            # Large Python ints mixed with small ones come back as rounded float64 (2**53 + 1
            # as 2**53 itself, so 2**53 is suspect too).
            return _to_integers_exactly(name, datatype, data, arr, target)
        _check_int_range(name, datatype, low, high, target)
        return arr
    if kind == "O":  # ints beyond 64 bits, or non-numbers such as None
        return _to_integers_exactly(name, datatype, data, arr, target)
    raise _bad_element(name, datatype, data, arr)


def _to_integers_exactly(
    name: str, datatype: str, data: Any, arr: np.ndarray, target: np.dtype[Any]
) -> np.ndarray:
    values: list[int] = []
    for item in leaves_of(data, arr):
        if isinstance(item, bool) or not isinstance(item, int | float):
            raise _bad_element(name, datatype, data, arr)
        if isinstance(item, float):
            if not math.isfinite(item) or not item.is_integer():
                raise InvalidTensor(
                    f"input '{name}' of datatype {datatype} has non-integral element {item!r}"
                )
            values.append(int(item))
        else:
            values.append(item)
    _check_int_range(name, datatype, min(values), max(values), target)
    return np.array(values, dtype=target)


def _check_int_range(
    name: str, datatype: str, low: float, high: float, target: np.dtype[Any]
) -> None:
    # Python compares ints and floats exactly, so no bound is blurred by a float conversion.
    info = np.iinfo(target)
    if low < info.min:
        bad = low
    elif high > info.max:
        bad = high
    else:
        return
    raise InvalidTensor(
        f"input '{name}' of datatype {datatype} has element {bad!r} "
        f"outside the range [{info.min}, {info.max}]"
    )


def _to_floats(
    name: str, datatype: str, data: Any, arr: np.ndarray, target: np.dtype[Any]
) -> np.ndarray:
    kind = arr.dtype.kind
    if kind == "O":  # ints beyond 64 bits, or non-numbers such as None
        leaves = leaves_of(data, arr)
        if any(isinstance(x, bool) or not isinstance(x, int | float) for x in leaves):
            raise _bad_element(name, datatype, data, arr)
        try:
            arr = np.array([float(x) for x in leaves])
        except OverflowError as exc:
            raise InvalidTensor(
                f"input '{name}' of datatype {datatype} has an element outside its range"
            ) from exc
    elif kind not in "iuf":
        raise _bad_element(name, datatype, data, arr)
    with np.errstate(over="ignore", invalid="ignore"):
        out = arr.astype(target, copy=False)
    if target.itemsize < 8 and not np.isfinite(out).all():
        overflowed = ~np.isfinite(out) & np.isfinite(arr)
        if overflowed.any():
            bad = arr[overflowed][0].item()
            raise InvalidTensor(
                f"input '{name}' of datatype {datatype} has element {bad!r} outside its range "
                f"(largest magnitude {float(np.finfo(target).max):g})"
            )
    return out


def _bad_element(name: str, datatype: str, data: Any, arr: np.ndarray) -> InvalidTensor:
    """The error for the first element of the wrong Python type."""
    if datatype == "BOOL":
        wanted = "true or false"

        def fits(x: Any) -> bool:
            return isinstance(x, bool)
    else:
        wanted = "numbers"

        def fits(x: Any) -> bool:
            return isinstance(x, int | float) and not isinstance(x, bool)

    for item in leaves_of(data, arr):
        if not fits(item):
            return InvalidTensor(
                f"input '{name}' of datatype {datatype} must hold {wanted}, "
                f"but has element {describe(item)}"
            )
    return InvalidTensor(
        f"input '{name}' of datatype {datatype} must hold {wanted}, "
        f"but its data has numpy dtype {arr.dtype}"
    )


def inputs_as_json(decoded: dict[str, Any]) -> dict[str, Any]:
    """A JSON-like view of decoded inputs, for validating them against a model's schema.

    Numpy arrays become nested lists, except that a one-element tensor becomes its scalar; a
    one-element list of ``str``/``bytes`` becomes that element. Other values pass through.
    """
    view: dict[str, Any] = {}
    for name, value in decoded.items():
        if isinstance(value, np.ndarray):
            view[name] = value.item() if value.size == 1 else value.tolist()
        elif isinstance(value, list) and len(value) == 1 and isinstance(value[0], str | bytes):
            view[name] = value[0]
        else:
            view[name] = value
    return view
