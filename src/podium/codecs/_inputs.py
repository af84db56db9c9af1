"""Request tensors to Python values: :func:`decode_input` and :func:`decode_request`, and the
JSON view of decoded inputs that a model's schema is checked against."""

from __future__ import annotations

import math
from typing import Annotated, Any, Union

import msgspec
import numpy as np

from podium.errors import InvalidInput, InvalidTensor
from podium.types import DATATYPES, InferenceRequest, Parameters, RequestInput

from ._bytes import check_bytes, counts_text, decode_bytes
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

__all__ = [
    "CheckedInput",
    "TypedRequest",
    "check_input",
    "checked_request",
    "check_request",
    "decode_input",
    "decode_request",
    "inputs_as_json",
    "request_builtins",
]


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
    if type(inp) is CheckedInput or (inp.datatype != "BYTES" and _is_plain(inp)):
        # (BYTES: never plain, and a call less)
        # Checked in full by that one pass: every element fits the datatype (integers exactly
        # within its range, and within 2**53 for a float datatype, where numpy's direct
        # conversion and the general path's int64 reading round alike), so numpy reads the
        # list straight into the datatype's dtype.
        return np.array(inp.data, dtype=NUMPY_DTYPES[inp.datatype]).reshape(inp.shape)
    return _decoded(inp)


def _decoded(inp: RequestInput) -> np.ndarray | list[str] | list[bytes]:
    """:func:`decode_input` for what :func:`_is_plain` does not pass: every datatype, shape and
    form of data, each check in turn."""
    shape, count = _checked_head(inp)
    datatype = inp.datatype
    if datatype == "BYTES":
        return decode_bytes(inp, shape, count)
    data = inp.data
    target = NUMPY_DTYPES[datatype]
    if isinstance(data, np.ndarray) and data.dtype == target and data.size == count:
        # Already decoded (decode_raw, or a model's own request): nothing to check or copy.
        return data.reshape(shape)
    arr = _numeric(inp.name, datatype, data, shape, count)
    if count == 0:
        return np.zeros(shape, dtype=target)
    # Checked: every element fits the datatype, so the cast neither overflows nor rounds an
    # integer (it only rounds floats to the datatype's precision).
    return arr.astype(target, copy=False).reshape(shape)


def check_input(inp: RequestInput, *, text_length_shapes: bool = False) -> None:
    """Raise what :func:`decode_input` raises for ``inp``, without decoding it: for a model that
    takes the request itself, which must get only tensors the protocol allows.

    Numeric data is checked by numpy (no Python loop over the elements); ``BYTES`` elements are
    checked to be strings or bytes (and UTF-8, for ``content_type: "str"``).

    With ``text_length_shapes`` (an MLServer runtime's requests), a ``BYTES`` input whose shape
    counts the characters or bytes of its one element (``"shape": [5], "data": ["hello"]``, what
    MLServer's examples send) passes as that one element; the shape is left as it came."""
    if type(inp) is CheckedInput or (inp.datatype != "BYTES" and _is_plain(inp)):
        return
    shape, count = _checked_head(inp)
    datatype = inp.datatype
    if datatype == "BYTES":
        if text_length_shapes and counts_text(inp.data, count):
            check_bytes(inp, [1], 1)
            return
        check_bytes(inp, shape, count)
        return
    data = inp.data
    if isinstance(data, np.ndarray) and data.dtype == NUMPY_DTYPES[datatype] and data.size == count:
        return
    _numeric(inp.name, datatype, data, shape, count)


def _checked_head(inp: RequestInput) -> tuple[list[int], int]:
    """The checked shape and element count of ``inp``, after its datatype and presence of data."""
    name = inp.name
    datatype = inp.datatype
    if not isinstance(datatype, str) or datatype not in DATATYPES:
        raise unknown_datatype(name, datatype)
    shape = check_shape(name, inp.shape)
    count = element_count(name, shape)
    data = inp.data
    if data is None:
        raise InvalidTensor(f"input '{name}' has no data")
    if isinstance(data, dict):
        raise InvalidTensor(
            f"input '{name}' has a JSON object as data; data is a list of the tensor's elements "
            "(flat or nested, in row-major order) or, for one element, that element"
        )
    return shape, count


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


def check_request(req: InferenceRequest, *, text_length_shapes: bool = False) -> None:
    """Raise what :func:`decode_request` raises for ``req``, without decoding it
    (:func:`check_input` for each input, with ``text_length_shapes``)."""
    inputs = req.inputs
    for inp in inputs:
        check_input(inp, text_length_shapes=text_length_shapes)
    if len(inputs) > 1:
        names = [inp.name for inp in inputs]
        if len(set(names)) != len(names):
            twice = next(n for i, n in enumerate(names) if n in names[:i])
            raise InvalidInput(f"input '{twice}' appears more than once in the request")


def _numeric(name: str, datatype: str, data: Any, shape: list[int], count: int) -> np.ndarray:
    """numpy's reading of ``data``, checked for the numeric ``datatype`` (every element of the
    right kind, integral and in range for integers, in range for floats) and not cast yet."""
    # Let numpy parse the whole (possibly nested) list at C speed, then judge the dtype it
    # inferred; per-element Python checks run only on the rare paths below.
    try:
        arr = np.asarray(data)
    except ValueError as exc:
        raise ragged_error(name) from exc
    if arr.size != count:
        raise count_error(name, shape, count, arr.size)
    if count == 0:
        return arr
    if datatype == "BOOL":
        if arr.dtype.kind != "b":
            raise _bad_element(name, datatype, data, arr)
        return arr
    target = NUMPY_DTYPES[datatype]
    if target.kind in "iu":
        return _to_integers(name, datatype, data, arr, target)
    return _to_floats(name, datatype, data, arr, target)


# Up to this many elements, Python's min() and max() over a flat list (loops in C) beat numpy's
# reductions, whose fixed cost is about a microsecond each; beyond it numpy is faster (and
# _PLAIN passes flat lists up to this many without numpy).
_SMALL = 64


def _bounds(data: Any, arr: np.ndarray) -> tuple[Any, Any]:
    """The least and the greatest element of ``arr`` (numpy's reading of ``data``), exactly for
    Python ints; NaN may stand for either when there is one."""
    if arr.ndim == 1 and type(data) is list and len(data) <= _SMALL:
        return min(data), max(data)
    return arr.min().item(), arr.max().item()


_SAFE_CASTS: dict[tuple[np.dtype[Any], np.dtype[Any]], bool] = {}


def _safe_cast(source: np.dtype[Any], target: np.dtype[Any]) -> bool:
    """``np.can_cast(source, target, "safe")``, remembered (a numpy call per tensor costs more
    than the lookup)."""
    key = (source, target)
    safe = _SAFE_CASTS.get(key)
    if safe is None:
        safe = _SAFE_CASTS[key] = bool(np.can_cast(source, target, "safe"))
    return safe


def _to_integers(
    name: str, datatype: str, data: Any, arr: np.ndarray, target: np.dtype[Any]
) -> np.ndarray:
    kind = arr.dtype.kind
    if kind in "iu":
        if not _safe_cast(arr.dtype, target):
            low, high = _bounds(data, arr)
            _check_int_range(name, datatype, low, high, target)
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
    least, greatest = _INT_RANGES[target]
    if low < least:
        bad = low
    elif high > greatest:
        bad = high
    else:
        return
    raise InvalidTensor(
        f"input '{name}' of datatype {datatype} has element {bad!r} "
        f"outside the range [{least}, {greatest}]"
    )


#: The least and greatest value of each integer dtype, as Python ints (``np.iinfo`` costs a
#: microsecond a call).
_INT_RANGES = {
    np.dtype(dt): (int(np.iinfo(dt).min), int(np.iinfo(dt).max))
    for dt in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)
}


#: The largest finite value of each float dtype narrower than float64.
_FLOAT_MAX = {np.dtype(dt): float(np.finfo(dt).max) for dt in (np.float16, np.float32)}


def _plain_element(dtype: np.dtype[Any]) -> Any:
    """The type of one element of a plain input of ``dtype`` (:data:`_PLAIN`)."""
    if dtype.kind == "b":
        return bool
    if dtype.kind in "iu":
        # (msgspec's bounds are an int64's: UINT64's elements past it go the general way)
        least, greatest = _INT_RANGES[dtype]
        return Annotated[int, msgspec.Meta(ge=least, le=min(greatest, 2**63 - 1))]
    # ints within 2**53 (numpy reads them straight into the float dtype as the general path's
    # int64 reading casts them: exactly, then one rounding), finite floats within the largest
    # finite value
    limit = _FLOAT_MAX.get(dtype, float(np.finfo(np.float64).max))
    exact = min(_EXACT_IN_FLOAT64, int(limit))
    return (
        Annotated[int, msgspec.Meta(ge=-exact, le=exact)]
        | Annotated[float, msgspec.Meta(ge=-limit, le=limit)]
    )


#: A shape as a plain input has it: non-negative Python ints.
_PLAIN_SHAPE = list[Annotated[int, msgspec.Meta(ge=0)]]


def _plain_type(datatype: str, dtype: np.dtype[Any]) -> type[msgspec.Struct]:
    """The one-pass type of the numeric ``datatype``'s plain inputs (:data:`_PLAIN`)."""
    return msgspec.defstruct(
        f"_Plain{datatype}",
        [("shape", _PLAIN_SHAPE), ("data", list[_plain_element(dtype)])],  # type: ignore[misc]
        array_like=True,
        tag=datatype,
        gc=False,
    )


#: An input's ``(datatype, shape, data)`` in the form a JSON body's tensor nearly always has,
#: checked by one ``msgspec.convert`` in C (``bench/input_checks.py``): a known numeric
#: datatype (the tag of an array-like union), a shape of non-negative Python ints, and a flat
#: list of that datatype's elements: ``bool`` for BOOL, at any length; else (up to ``_SMALL``
#: of them: beyond it numpy's reading costs less, and :func:`_is_plain` sends longer ones on)
#: ``int`` (not ``bool``, not ``float``) within an integer datatype's range (to an int64's
#: greatest for UINT64), or ``int`` within 2**53 and finite ``float`` within the largest finite
#: value for a float datatype. What it passes, the general path (:func:`_checked_head` and
#: :func:`_numeric`) passes too; what it refuses goes there, which names what is wrong or passes
#: what only it can judge (integral floats for an integer, floats that round to the largest
#: finite value, infinities, NaN, nested lists, numpy data, BYTES), so every check and every
#: message is kept. (msgspec keeps what it compiled of a Struct type, and would compile a bare
#: union anew on every call: hence the one-field wrapper.)
_PLAIN = msgspec.defstruct(
    "_PlainInput",
    [
        (
            "input",
            Union[  # noqa: UP007 (a union built from a tuple of types)
                tuple(_plain_type(name, dtype) for name, dtype in NUMPY_DTYPES.items())
            ],
        )
    ],
    array_like=True,
    gc=False,
)


#: The datatypes :data:`_PLAIN` knows, and the longest list of each that it takes.
_PLAIN_LENGTHS = {
    name: math.inf if dtype.kind == "b" else _SMALL for name, dtype in NUMPY_DTYPES.items()
}


def _is_plain(inp: RequestInput) -> bool:
    """True when ``inp`` is plain (:data:`_PLAIN`: checked in full in one pass) and its shape
    counts its elements, so nothing else is left to check; False sends it the general way."""
    datatype = inp.datatype
    try:
        longest = _PLAIN_LENGTHS.get(datatype, 0)
    except TypeError:  # an unhashable datatype: the general path names what is wrong
        return False
    data = inp.data
    # What the one pass would refuse for its form alone (BYTES or an unknown datatype, nested
    # lists, long lists) is sent on before it: a refusal costs msgspec an exception, more than
    # the pass itself.
    if type(data) is not list or not 0 < len(data) <= longest or type(data[0]) is list:
        return False
    shape = inp.shape
    try:
        msgspec.convert(((datatype, shape, data),), _PLAIN)
    except msgspec.ValidationError:
        return False
    # (non-zero, so the shape is one any array can have)
    return len(data) == math.prod(shape)


class CheckedInput(RequestInput, kw_only=True, omit_defaults=True):
    """A plain input (:data:`_PLAIN`) that was checked in full while its JSON was decoded
    (:func:`checked_request`): :func:`check_input` has nothing left to check, and
    :func:`decode_input` reads its data straight into the datatype's dtype. Its data must not be
    replaced (a model that takes the request gets it after the check)."""


def _typed_input(datatype: str, dtype: np.dtype[Any]) -> type[msgspec.Struct]:
    """A JSON input of the numeric ``datatype``, tagged by it: its shape and each element of a
    flat list as a plain input has them (the same types as :data:`_PLAIN`'s); data of another
    JSON form (a bare scalar, an object, none) is taken as it comes, for the general path. A
    body with a nested list, or an element that a plain input's type refuses, is refused."""
    element: Any = _plain_element(dtype)
    data: Any = Union[list[element], dict[str, Any], str, int, float, None]  # noqa: UP007
    return msgspec.defstruct(
        f"_Typed{datatype}",
        [
            ("name", str),
            ("shape", _PLAIN_SHAPE),
            ("parameters", Union[Parameters, None], None),  # noqa: UP007
            ("data", data, None),
        ],
        kw_only=True,
        tag=datatype,
        tag_field="datatype",
        gc=False,
    )


class _TypedBytes(msgspec.Struct, kw_only=True, tag="BYTES", tag_field="datatype", gc=False):
    """A JSON input of datatype BYTES, as :class:`RequestInput` takes it."""

    name: str
    shape: list[int]
    parameters: Parameters | None = None
    data: Any = None


#: Each typed input's datatype.
_TYPED_DATATYPES: dict[type[msgspec.Struct], str] = {
    _typed_input(name, dtype): name for name, dtype in NUMPY_DTYPES.items()
}
_TYPED_DATATYPES[_TypedBytes] = "BYTES"


class TypedRequest(InferenceRequest, kw_only=True, omit_defaults=True):
    """An inference request's JSON decoded with each input typed by its datatype, so that a
    plain numeric input is checked while it is decoded (what :func:`checked_request` takes). A
    body that this refuses (an unknown datatype, a nested list, a numeric element that is wrong
    or that only the general path can judge, any malformed field) is decoded as an :class:`InferenceRequest`
    and checked the general way, which names what is wrong."""

    inputs: list[Union[tuple(_TYPED_DATATYPES)]]  # type: ignore[valid-type]  # noqa: UP007


def checked_request(typed: TypedRequest) -> InferenceRequest:
    """The :class:`InferenceRequest` of ``typed``, its inputs as :class:`RequestInput`: a
    :class:`CheckedInput` for each plain one (a flat list whose length the shape counts), else
    as it came."""
    inputs: list[RequestInput] = []
    for inp in typed.inputs:
        datatype = _TYPED_DATATYPES[type(inp)]
        data = inp.data
        if (
            datatype != "BYTES"
            and type(data) is list
            and 0 < len(data) == math.prod(inp.shape)  # (flat: its elements were checked)
        ):
            made: RequestInput = CheckedInput(
                name=inp.name,
                shape=inp.shape,
                datatype=datatype,
                parameters=inp.parameters,
                data=data,
            )
        else:
            made = RequestInput(
                name=inp.name,
                shape=inp.shape,
                datatype=datatype,
                parameters=inp.parameters,
                data=data,
            )
        inputs.append(made)
    # an InferenceRequest as the generic decode makes it: a model that takes the request sees
    # the type it is documented to get (a struct compares equal only to its own type)
    return InferenceRequest(
        inputs=inputs, id=typed.id, parameters=typed.parameters, outputs=typed.outputs
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
        data = leaves
        kind = "f"
    elif kind not in "iuf":
        raise _bad_element(name, datatype, data, arr)
    limit = _FLOAT_MAX.get(target)
    # Integers fit float32 (int64 and uint64 are below 2**64); floats may not fit, and neither
    # fit float16.
    if limit is not None and (kind == "f" or limit < 2.0**64):
        low, high = _bounds(data, arr)
        if not (-limit <= low and high <= limit):  # out of range, infinite or NaN somewhere
            _check_float_range(name, datatype, arr, target)
    return arr


def _check_float_range(name: str, datatype: str, arr: np.ndarray, target: np.dtype[Any]) -> None:
    """Raise for a finite element that the cast to ``target`` makes infinite (one that only
    rounds to the largest finite value passes; infinities and NaN pass as they are)."""
    with np.errstate(over="ignore", invalid="ignore"):
        out = arr.astype(target)
    overflowed = ~np.isfinite(out) & np.isfinite(arr)
    if overflowed.any():
        bad = arr[overflowed][0].item()
        raise InvalidTensor(
            f"input '{name}' of datatype {datatype} has element {bad!r} outside its range "
            f"(largest magnitude {float(np.finfo(target).max):g})"
        )


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


def request_builtins(request: msgspec.Struct) -> Any:
    """An OIP request as JSON-like data (``InputKind.RAW``, and what an MLServer runtime's
    request is made from): numpy data as lists; ``bytes`` stay ``bytes`` (BYTES tensors that
    came raw over gRPC or the binary extension), as MLServer's runtimes see them; from a JSON
    body they are already text."""
    return msgspec.to_builtins(request, builtin_types=(bytes, bytearray), enc_hook=_plain)


def _plain(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, memoryview):
        return obj.tobytes()
    raise TypeError(f"{type(obj).__name__} is not JSON-like")
