"""Open Inference Protocol (v2) tensors to Python values and back.

Decoding (request side): :func:`decode_input` turns one ``RequestInput`` into a numpy array of
the exact dtype its datatype names, or, for ``BYTES``, into a flat ``list[bytes]`` (or
``list[str]`` when the input's parameters say ``content_type: "str"``). Every way a tensor can
be wrong (datatype, shape, element count, element type, range) raises
:class:`~podium.errors.InvalidTensor` with a message that names the input.

Encoding (response side): :func:`encode_output` turns what a model returned (numpy arrays and
scalars, Python numbers, strings, bytes, lists of them) into a ``ResponseOutput`` whose ``data`` is
always a flat Python list; :func:`encode_outputs` does it for a whole result and applies the
outputs a client asked for. A value that no OIP tensor can carry raises
:class:`~podium.errors.UnsupportedRepresentation` naming the output.

Raw tensors (the binary tensor extension of REST, ``raw_input_contents`` /
``raw_output_contents`` of gRPC): :func:`decode_raw` reads one tensor from its raw little-endian
bytes, :func:`encode_raw` writes one output's raw bytes. BOOL is one byte per element, BYTES
elements are each a 4-byte little-endian length followed by that many bytes.

Numpy has no bfloat16, so ``BF16`` tensors decode to ``float32`` arrays (JSON values are kept as
sent, not rounded to bfloat16 precision; raw ones are exact). Only :func:`encode_raw` writes
``BF16`` (a model's ``ResponseOutput`` may name it); nothing infers it from a value.

This module knows nothing about HTTP or gRPC: front ends hand it the neutral structs of
:mod:`podium.types`.
"""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np

from podium.errors import InvalidInput, InvalidTensor, UnsupportedRepresentation
from podium.types import (
    DATATYPES,
    InferenceRequest,
    InferenceResponse,
    RequestInput,
    RequestOutput,
    ResponseOutput,
)

__all__ = [
    "concat_outputs",
    "decode_input",
    "decode_raw",
    "decode_request",
    "encode_output",
    "encode_outputs",
    "encode_raw",
    "inputs_as_json",
    "json_default",
]

#: The numpy dtype each numeric datatype decodes to (BF16: float32, as numpy has no bfloat16).
_NUMPY_DTYPES: dict[str, np.dtype[Any]] = {
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

# Keyed by (kind, itemsize) rather than dtype so that byte order does not matter.
_DATATYPE_OF: dict[tuple[str, int], str] = {
    ("b", 1): "BOOL",
    ("u", 1): "UINT8",
    ("u", 2): "UINT16",
    ("u", 4): "UINT32",
    ("u", 8): "UINT64",
    ("i", 1): "INT8",
    ("i", 2): "INT16",
    ("i", 4): "INT32",
    ("i", 8): "INT64",
    ("f", 2): "FP16",
    ("f", 4): "FP32",
    ("f", 8): "FP64",
}

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_UINT64_MAX = 2**64 - 1
# Beyond this magnitude float64 cannot hold every integer, so numpy may have rounded the ints.
_EXACT_IN_FLOAT64 = 2**53


class _RaggedError(ValueError):
    """Nested lists whose lengths disagree."""


# --------------------------------------------------------------------------------------------
# Decoding


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
        raise InvalidTensor(
            f"input '{name}' has unknown datatype {datatype!r}; "
            f"expected one of: {', '.join(sorted(DATATYPES))}"
        )
    shape = _check_shape(name, inp.shape)
    count = math.prod(shape)
    if inp.data is None:
        raise InvalidTensor(f"input '{name}' has no data")
    if datatype == "BYTES":
        return _decode_bytes(inp, shape, count)
    data = inp.data
    if (
        isinstance(data, np.ndarray)
        and data.dtype == _NUMPY_DTYPES[datatype]
        and data.size == count
    ):
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


def _check_shape(name: str, shape: Any) -> list[int]:
    if isinstance(shape, list | tuple) and all(
        isinstance(dim, int | np.integer) and not isinstance(dim, bool) and dim >= 0
        for dim in shape
    ):
        return [int(dim) for dim in shape]
    raise InvalidTensor(
        f"input '{name}' has shape {shape!r}; a shape must be a list of non-negative integers"
    )


def _count_error(name: str, shape: list[int], count: int, got: int) -> InvalidTensor:
    return InvalidTensor(
        f"input '{name}' has shape {shape} ({_plural(count, 'element')}) "
        f"but {_plural(got, 'data element')}"
    )


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _decode_numeric(
    name: str, datatype: str, data: Any, shape: list[int], count: int
) -> np.ndarray:
    target = _NUMPY_DTYPES[datatype]
    # Let numpy parse the whole (possibly nested) list at C speed, then judge the dtype it
    # inferred; per-element Python checks run only on the rare paths below.
    try:
        arr = np.asarray(data)
    except ValueError as exc:
        raise _ragged_error(name) from exc
    if arr.size != count:
        raise _count_error(name, shape, count, arr.size)
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


def _ragged_error(name: str) -> InvalidTensor:
    return InvalidTensor(
        f"input '{name}' has ragged data: nested lists must be rectangular (row-major)"
    )


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
        if max(abs(low), abs(high)) > _EXACT_IN_FLOAT64:
            # Large Python ints mixed with small ones come back as rounded float64.
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
    for item in _leaves_of(data, arr):
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
        leaves = _leaves_of(data, arr)
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

    for item in _leaves_of(data, arr):
        if not fits(item):
            return InvalidTensor(
                f"input '{name}' of datatype {datatype} must hold {wanted}, "
                f"but has element {_describe(item)}"
            )
    return InvalidTensor(
        f"input '{name}' of datatype {datatype} must hold {wanted}, "
        f"but its data has numpy dtype {arr.dtype}"
    )


def _describe(item: Any) -> str:
    if item is None:
        return "null"
    text = repr(item)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{text} ({type(item).__name__})"


def _leaves_of(data: Any, arr: np.ndarray) -> list[Any]:
    """The original elements of ``data`` (``arr`` is numpy's reading of it), row-major."""
    try:
        return _leaves(data)
    except _RaggedError:
        return list(arr.ravel().tolist())


def _leaves(data: Any) -> list[Any]:
    """Flatten a rectangular nested list in row-major order; a non-list is one element."""
    if isinstance(data, np.ndarray):
        return list(data.ravel().tolist())
    if not isinstance(data, list | tuple):
        return [data]
    level: list[Any] = list(data)
    while level and isinstance(level[0], list | tuple):
        width = len(level[0])
        below: list[Any] = []
        for item in level:
            if not isinstance(item, list | tuple) or len(item) != width:
                raise _RaggedError
            below.extend(item)
        level = below
    if any(isinstance(item, list | tuple) for item in level):
        raise _RaggedError
    return level


def _decode_bytes(inp: RequestInput, shape: list[int], count: int) -> list[str] | list[bytes]:
    name = inp.name
    try:
        leaves = _leaves(inp.data)
    except _RaggedError as exc:
        raise _ragged_error(name) from exc
    if len(leaves) != count:
        raise _count_error(name, shape, count, len(leaves))
    params = inp.parameters
    if isinstance(params, dict) and params.get("content_type") == "str":
        texts: list[str] = []
        for item in leaves:
            if isinstance(item, str):
                texts.append(item)
            elif isinstance(item, bytes):
                try:
                    texts.append(item.decode("utf-8"))
                except UnicodeDecodeError as exc:
                    raise InvalidTensor(
                        f"input '{name}' has content_type 'str' but element "
                        f"{_describe(item)} is not valid UTF-8"
                    ) from exc
            else:
                raise _bad_bytes_element(name, item)
        return texts
    blobs: list[bytes] = []
    for item in leaves:
        if isinstance(item, bytes):
            blobs.append(item)
        elif isinstance(item, str):
            try:
                blobs.append(item.encode("utf-8"))
            except UnicodeEncodeError as exc:
                raise InvalidTensor(
                    f"input '{name}' of datatype BYTES has element {_describe(item)} "
                    "that cannot be encoded as UTF-8"
                ) from exc
        else:
            raise _bad_bytes_element(name, item)
    return blobs


def _bad_bytes_element(name: str, item: Any) -> InvalidTensor:
    return InvalidTensor(
        f"input '{name}' of datatype BYTES must hold strings, but has element {_describe(item)}"
    )


# --------------------------------------------------------------------------------------------
# Encoding


def encode_output(name: str, value: Any) -> ResponseOutput:
    """Encode one model result as an OIP output tensor called ``name``.

    - numpy arrays keep their shape; the datatype follows the dtype (bool, (u)int8-64,
      float16/32/64; str, bytes and object arrays become ``BYTES``);
    - numpy scalars and Python ``bool`` (BOOL), ``int`` (INT64, or UINT64 above the INT64
      range), ``float`` (FP64), ``str`` and ``bytes`` (BYTES) become shape ``[1]``;
    - a list of ``str``/``bytes`` becomes ``BYTES`` of shape ``[n]``; other (nested) lists of
      numbers go through ``np.asarray``;
    - a ``ResponseOutput`` is returned unchanged.

    ``data`` is always a flat Python list; bytes are decoded as UTF-8 because JSON carries only
    text. Anything else (``None``, dicts, arbitrary objects, ragged lists, non-UTF-8 bytes)
    raises :class:`UnsupportedRepresentation` naming the output.
    """
    if isinstance(value, ResponseOutput):
        return value
    if isinstance(value, np.ndarray):
        return _encode_array(name, value)
    if isinstance(value, np.generic):
        return _encode_array(name, np.asarray(value).reshape(1))
    if isinstance(value, bool):
        return ResponseOutput(name=name, shape=[1], datatype="BOOL", data=[value])
    if isinstance(value, int):
        if _INT64_MIN <= value <= _INT64_MAX:
            datatype = "INT64"
        elif 0 <= value <= _UINT64_MAX:
            datatype = "UINT64"
        else:
            raise UnsupportedRepresentation(
                f"output '{name}' is the integer {value}, outside every OIP integer datatype"
            )
        return ResponseOutput(name=name, shape=[1], datatype=datatype, data=[int(value)])
    if isinstance(value, float):
        return ResponseOutput(name=name, shape=[1], datatype="FP64", data=[float(value)])
    if isinstance(value, str | bytes):
        return ResponseOutput(name=name, shape=[1], datatype="BYTES", data=[_text(name, value)])
    if isinstance(value, list | tuple):
        return _encode_sequence(name, value)
    raise UnsupportedRepresentation(
        f"output '{name}' is of Python type {type(value).__name__}, which cannot be encoded "
        "as an OIP tensor; return a numpy array, a number, a string, bytes or a list of them"
    )


def _encode_array(name: str, arr: np.ndarray) -> ResponseOutput:
    shape = [int(dim) for dim in arr.shape]
    kind = arr.dtype.kind
    datatype = _DATATYPE_OF.get((kind, arr.dtype.itemsize))
    if datatype is not None:
        return ResponseOutput(name=name, shape=shape, datatype=datatype, data=arr.ravel().tolist())
    if kind in "USO":
        data = [_text(name, item) for item in arr.ravel().tolist()]
        return ResponseOutput(name=name, shape=shape, datatype="BYTES", data=data)
    raise UnsupportedRepresentation(
        f"output '{name}' has numpy dtype {arr.dtype}, which has no OIP datatype"
    )


def _encode_sequence(name: str, value: list[Any] | tuple[Any, ...]) -> ResponseOutput:
    try:
        arr = np.asarray(value)
    except ValueError as exc:
        raise UnsupportedRepresentation(
            f"output '{name}' is a ragged nested list; only rectangular lists encode as a tensor"
        ) from exc
    if arr.dtype.kind in "biuf":
        return _encode_array(name, arr)
    # Strings, bytes or a mix: look at the original elements, not numpy's copies, which would
    # turn numbers into strings and drop trailing NULs from bytes.
    objects = np.empty(arr.shape, dtype=object)
    objects[...] = value
    if arr.dtype.kind == "O" and all(
        isinstance(x, int) and not isinstance(x, bool) for x in objects.ravel().tolist()
    ):
        raise UnsupportedRepresentation(
            f"output '{name}' holds integers outside every OIP integer datatype"
        )
    return _encode_array(name, objects)


def _text(name: str, item: Any) -> str:
    if isinstance(item, str):
        return str(item)
    if isinstance(item, bytes):
        try:
            return item.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UnsupportedRepresentation(
                f"output '{name}' holds bytes that are not valid UTF-8, which JSON cannot carry"
            ) from exc
    raise UnsupportedRepresentation(
        f"output '{name}' has element {_describe(item)}, which fits no OIP datatype together "
        "with the rest (a tensor holds only numbers, or only str and bytes)"
    )


def encode_outputs(
    result: Any, requested: list[RequestOutput] | None = None
) -> list[ResponseOutput]:
    """Encode a model's whole result as OIP outputs.

    An ``InferenceResponse`` gives its outputs; a list or tuple of ``ResponseOutput`` is used as
    is; a dict gives one output per key (keys must be strings); any other value gives one output
    named ``"output"``. When ``requested`` is non-empty only those outputs are kept, in the
    requested order, and a requested name the model did not produce raises
    :class:`InvalidInput`.
    """
    outputs: list[ResponseOutput]
    if isinstance(result, InferenceResponse):
        outputs = list(result.outputs)
    elif (
        isinstance(result, list | tuple)
        and result
        and all(isinstance(item, ResponseOutput) for item in result)
    ):
        outputs = list(result)
    elif isinstance(result, dict):
        outputs = []
        for key, value in result.items():
            if not isinstance(key, str):
                raise UnsupportedRepresentation(
                    f"output names must be strings, but the model returned a dict with key "
                    f"{_describe(key)}"
                )
            outputs.append(encode_output(key, value))
    else:
        outputs = [encode_output("output", result)]
    if requested:
        outputs = _select(outputs, requested)
    return outputs


def _select(outputs: list[ResponseOutput], requested: list[RequestOutput]) -> list[ResponseOutput]:
    by_name: dict[str, ResponseOutput] = {}
    for out in outputs:
        by_name.setdefault(out.name, out)
    selected: dict[str, ResponseOutput] = {}
    for want in requested:
        found = by_name.get(want.name)
        if found is None:
            produced = ", ".join(by_name) or "nothing"
            raise InvalidInput(
                f"requested output '{want.name}' is not produced by the model; "
                f"it produced: {produced}"
            )
        selected.setdefault(want.name, found)
    return list(selected.values())


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


def json_default(obj: Any) -> Any:
    """``enc_hook`` for ``msgspec.json.Encoder``: make numpy values (and bytes) JSON-able.

    Arrays become nested lists, numpy scalars Python scalars, bytes UTF-8 text (non-UTF-8 bytes
    raise :class:`UnsupportedRepresentation`), sets and tuples lists. Anything else raises
    ``TypeError``, as msgspec expects. msgspec itself encodes top-level ``bytes`` as base64
    without calling the hook; bytes inside numpy arrays are decoded here.
    """
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind in "SO":
            return _decode_nested_bytes(obj.tolist())
        return obj.tolist()
    if isinstance(obj, np.generic):
        item = obj.item()
        return _utf8(item) if isinstance(item, bytes) else item
    if isinstance(obj, bytes | bytearray | memoryview):
        return _utf8(bytes(obj))
    if isinstance(obj, set | frozenset | tuple):
        return list(obj)
    raise TypeError(f"objects of type {type(obj).__name__} are not JSON serializable")


def _decode_nested_bytes(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode_nested_bytes(item) for item in value]
    if isinstance(value, bytes):
        return _utf8(value)
    return value


def _utf8(value: bytes) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnsupportedRepresentation(
            f"the model's result holds bytes {_describe(value)} that are not valid UTF-8, "
            "which JSON cannot carry"
        ) from exc


def concat_outputs(parts: list[list[ResponseOutput]]) -> list[ResponseOutput]:
    """Join the outputs of streamed items into one list of outputs.

    Outputs with the same name are concatenated along the first axis: their data appended and
    ``shape[0]`` summed; the datatype and the other dimensions must match, else
    :class:`UnsupportedRepresentation` naming the output. A scalar (shape ``[]``) counts as
    shape ``[1]``. Names keep the order in which they first appear; the inputs are not modified.
    """
    merged: dict[str, ResponseOutput] = {}
    for part in parts:
        for out in part:
            shape = list(out.shape) or [1]
            try:
                data = _leaves(out.data)
            except _RaggedError as exc:
                raise UnsupportedRepresentation(
                    f"output '{out.name}' has ragged data and cannot be concatenated"
                ) from exc
            current = merged.get(out.name)
            if current is None:
                merged[out.name] = ResponseOutput(
                    name=out.name,
                    shape=shape,
                    datatype=out.datatype,
                    parameters=out.parameters,
                    data=data,
                )
                continue
            if out.datatype != current.datatype:
                raise UnsupportedRepresentation(
                    f"output '{out.name}' changes datatype between streamed items "
                    f"({current.datatype}, then {out.datatype}) and cannot be concatenated"
                )
            if shape[1:] != current.shape[1:]:
                raise UnsupportedRepresentation(
                    f"output '{out.name}' changes shape between streamed items "
                    f"({current.shape}, then {shape}); all but the first dimension must match"
                )
            current.shape[0] += shape[0]
            current.data.extend(data)
    return list(merged.values())


# --------------------------------------------------------------------------------------------
# Raw tensors: the binary tensor extension (REST) and raw contents (gRPC)

#: The exact little-endian dtype of each fixed-size datatype's raw elements (BF16: its bits).
_RAW_DTYPES: dict[str, np.dtype[Any]] = {
    "BOOL": np.dtype("u1"),
    "UINT8": np.dtype("u1"),
    "UINT16": np.dtype("<u2"),
    "UINT32": np.dtype("<u4"),
    "UINT64": np.dtype("<u8"),
    "INT8": np.dtype("i1"),
    "INT16": np.dtype("<i2"),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
    "FP16": np.dtype("<f2"),
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
    "BF16": np.dtype("<u2"),
}

# The little-endian unsigned length before each BYTES element.
_LENGTH = struct.Struct("<I")


def decode_raw(
    name: str, datatype: str, shape: list[int], buf: bytes | memoryview
) -> np.ndarray | list[bytes]:
    """Decode one tensor from its raw little-endian bytes (OIP / Triton raw encoding).

    Fixed-size datatypes give a numpy array of the same dtype :func:`decode_input` gives,
    reshaped to ``shape``: ``BOOL`` is one byte per element (0 false, anything else true),
    ``FP16`` gives ``float16``, ``BF16`` (two bytes per element, the upper half of a float32)
    gives ``float32`` holding exactly the sent values. ``BYTES`` gives a flat ``list[bytes]``;
    each element on the wire is a 4-byte little-endian unsigned length and then that many bytes.

    Numeric arrays are views of ``buf`` (no copy) wherever the bytes can be used as they are,
    and are then **read-only** when ``buf`` is (``bytes`` always is); ``BOOL`` with bytes other
    than 0 and 1 and ``BF16`` are converted into new arrays. Keep ``buf`` alive and unchanged as
    long as the array is in use.

    Raises :class:`InvalidTensor`, naming the input, for an unknown datatype, a malformed shape,
    a byte size that is not the element count times the element size, and ``BYTES`` data that
    is truncated, holds a different number of elements than the shape, or has trailing bytes.
    """
    if not isinstance(datatype, str) or datatype not in DATATYPES:
        raise InvalidTensor(
            f"input '{name}' has unknown datatype {datatype!r}; "
            f"expected one of: {', '.join(sorted(DATATYPES))}"
        )
    dims = _check_shape(name, shape)
    count = math.prod(dims)
    if datatype == "BYTES":
        return _decode_raw_bytes(name, dims, count, buf)
    raw = _RAW_DTYPES[datatype]
    needed = count * raw.itemsize
    got = memoryview(buf).nbytes
    if got != needed:
        raise InvalidTensor(
            f"input '{name}' of datatype {datatype} and shape {dims} needs "
            f"{_plural(needed, 'byte')} of raw data, got {got}"
        )
    arr = np.frombuffer(buf, dtype=raw)
    if datatype == "BOOL":
        # numpy's bool must be 0 or 1; other bytes would make a bool array that misbehaves.
        arr = arr.view(np.bool_) if count == 0 or arr.max() <= 1 else arr != 0
    elif datatype == "BF16":
        arr = (arr.astype("<u4") << 16).view("<f4")
    return arr.reshape(dims)


def _decode_raw_bytes(
    name: str, shape: list[int], count: int, buf: bytes | memoryview
) -> list[bytes]:
    view = buf if isinstance(buf, bytes) else memoryview(buf).cast("B")
    size = len(view)
    elements: list[bytes] = []
    offset = 0
    end_of_shape = 0 if count == 0 else -1  # where the element that completes the shape ends
    unpack = _LENGTH.unpack_from
    while offset < size:
        if offset + 4 > size:
            problem = (
                f"element {len(elements)} has only {size - offset} of the 4 bytes of its length"
            )
            break
        (length,) = unpack(view, offset)
        offset += 4
        if offset + length > size:
            problem = (
                f"element {len(elements)} declares {_plural(length, 'byte')} "
                f"but only {size - offset} remain"
            )
            break
        elements.append(bytes(view[offset : offset + length]))
        offset += length
        if len(elements) == count:
            end_of_shape = offset
    else:
        if len(elements) != count:
            raise _count_error(name, shape, count, len(elements))
        return elements
    if end_of_shape >= 0:
        raise InvalidTensor(
            f"input '{name}' of datatype BYTES and shape {shape} has "
            f"{_plural(size - end_of_shape, 'trailing byte')} after its "
            f"{_plural(count, 'element')}"
        )
    raise InvalidTensor(f"input '{name}' of datatype BYTES is truncated: {problem}")


def encode_raw(output: ResponseOutput) -> bytes:
    """The raw little-endian bytes of ``output``'s data, per its ``datatype``.

    ``data`` is a flat list (as :func:`encode_output` makes it), a nested list, or a numpy array;
    its element count must match ``shape``. ``BOOL`` is one byte per element (0 or 1); ``FP16``
    is IEEE half precision; ``BF16`` is the upper 16 bits of each value as float32, rounded to
    nearest even (NaN stays NaN); ``BYTES`` is each element as a 4-byte little-endian length
    followed by its bytes (``str`` elements UTF-8 encoded).

    Raises :class:`UnsupportedRepresentation`, naming the output, for an unknown datatype, an
    element count that disagrees with the shape, or elements the datatype cannot hold.
    """
    name = output.name
    datatype = output.datatype
    data = output.data
    count = math.prod(output.shape)
    if datatype == "BYTES":
        return _encode_raw_bytes(name, data, count)
    raw = _RAW_DTYPES.get(datatype) if isinstance(datatype, str) else None
    if raw is None:
        raise UnsupportedRepresentation(
            f"output '{name}' has unknown datatype {datatype!r}; "
            f"expected one of: {', '.join(sorted(DATATYPES))}"
        )
    if (
        isinstance(data, np.ndarray)
        and data.dtype == raw
        and datatype not in ("BF16", "BOOL")
        and data.size == count
    ):
        return data.tobytes()  # already these bytes (e.g. a decoded input echoed back)
    target = np.dtype("<f4") if datatype == "BF16" else _NUMPY_DTYPES[datatype]
    try:
        with np.errstate(over="ignore"):
            arr = np.asarray(data, dtype=target)
    except (ValueError, TypeError, OverflowError) as exc:
        raise UnsupportedRepresentation(
            f"output '{name}' of datatype {datatype} has data that does not fit it: {exc}"
        ) from exc
    if arr.size != count:
        raise UnsupportedRepresentation(
            f"output '{name}' has shape {list(output.shape)} ({_plural(count, 'element')}) "
            f"but {_plural(arr.size, 'data element')}"
        )
    if datatype == "BF16":
        return _bf16_bits(arr).tobytes()
    if datatype == "BOOL":
        return arr.tobytes()  # numpy's bools are the bytes 0 and 1
    return arr.astype(raw, copy=False).tobytes()  # free on little-endian machines


def _bf16_bits(arr: np.ndarray) -> np.ndarray:
    """The bfloat16 bits of a float32 array, rounded to nearest even."""
    bits = np.ascontiguousarray(arr, dtype="<f4").view("<u4").ravel()
    rounded = (bits + (0x7FFF + ((bits >> 16) & 1))) >> 16
    # Rounding a NaN's bits could carry it into infinity (or flip its sign): keep a quiet NaN.
    nan = np.isnan(arr.ravel())
    if nan.any():
        rounded[nan] = (bits[nan] >> 16) | 0x0040
    return rounded.astype("<u2")


def _encode_raw_bytes(name: str, data: Any, count: int) -> bytes:
    if isinstance(data, np.ndarray):
        items = data.ravel().tolist()
    else:
        try:
            items = _leaves(data)
        except _RaggedError as exc:
            raise UnsupportedRepresentation(
                f"output '{name}' has ragged data; a tensor must be rectangular"
            ) from exc
    if len(items) != count:
        raise UnsupportedRepresentation(
            f"output '{name}' has {_plural(count, 'element')} by its shape "
            f"but {_plural(len(items), 'data element')}"
        )
    parts: list[bytes] = []
    pack = _LENGTH.pack
    for item in items:
        if isinstance(item, str):
            try:
                blob = item.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise UnsupportedRepresentation(
                    f"output '{name}' has element {_describe(item)} that cannot be encoded as UTF-8"
                ) from exc
        elif isinstance(item, bytes | bytearray | memoryview):
            blob = bytes(item)
        else:
            raise UnsupportedRepresentation(
                f"output '{name}' of datatype BYTES must hold str or bytes, "
                f"but has element {_describe(item)}"
            )
        parts.append(pack(len(blob)))
        parts.append(blob)
    return b"".join(parts)
