"""Model results to response tensors: :func:`encode_output`, :func:`encode_outputs` (with the
outputs a client asked for), :func:`concat_outputs` for streamed items, and :func:`json_default`
for the JSON encoder of every answer."""

from __future__ import annotations

from typing import Any

import numpy as np

from podium.errors import InvalidInput, UnsupportedRepresentation
from podium.types import InferenceResponse, RequestOutput, ResponseOutput

from ._datatypes import DATATYPE_OF
from ._shape import RaggedError, describe, flatten

__all__ = ["concat_outputs", "encode_output", "encode_outputs", "joined", "json_default", "texts"]


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_UINT64_MAX = 2**64 - 1


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
    datatype = DATATYPE_OF.get((kind, arr.dtype.itemsize))
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
        f"output '{name}' has element {describe(item)}, which fits no OIP datatype together "
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
                    f"{describe(key)}"
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


def json_default(obj: Any) -> Any:
    """``enc_hook`` for ``msgspec.json.Encoder``: make numpy values (and bytes) JSON-able.

    Arrays become nested lists, numpy scalars Python scalars, bytes UTF-8 text (non-UTF-8 bytes
    raise :class:`UnsupportedRepresentation`), sets and tuples lists. Anything else raises
    ``TypeError``, as msgspec expects. msgspec itself encodes top-level ``bytes`` as base64
    without calling the hook; bytes inside numpy arrays are decoded here.
    """
    try:
        if isinstance(obj, np.ndarray):
            return texts(obj.tolist()) if obj.dtype.kind in "SO" else obj.tolist()
        if isinstance(obj, np.generic):
            return texts(obj.item())
        if isinstance(obj, bytes | bytearray | memoryview):
            return texts(obj)
    except UnicodeDecodeError as exc:
        raise UnsupportedRepresentation(
            f"the model's result holds bytes {describe(exc.object)} that are not valid UTF-8, "
            "which JSON cannot carry"
        ) from exc
    if isinstance(obj, set | frozenset | tuple):
        return list(obj)
    raise TypeError(f"objects of type {type(obj).__name__} are not JSON serializable")


def texts(data: Any) -> Any:
    """``data`` (an element, or nested lists of them) with every bytes-like element as its
    UTF-8 text, as JSON carries ``BYTES``; ``UnicodeDecodeError`` for bytes that are not UTF-8
    (the caller names what held them)."""
    if isinstance(data, list):
        return [texts(item) for item in data]
    if isinstance(data, bytes | bytearray | memoryview):
        return str(data, "utf-8")
    return data


def joined(items: list[Any]) -> Any:
    """Streamed items as one value: text joined, bytes joined, anything else (or nothing) the
    list."""
    if items and all(isinstance(i, str) for i in items):
        return "".join(items)
    if items and all(isinstance(i, bytes | bytearray) for i in items):
        return b"".join(items)
    return items


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
                data = flatten(out.data)
            except RaggedError as exc:
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
