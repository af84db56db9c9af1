"""Truss's bodies, byte for byte: JSON as the Truss server writes it, and its MessagePack.

JSON answers carry what Truss's server sends (``json.dumps`` of the value, numpy integers,
floats and arrays as numbers and lists; a pydantic model as its own ``model_dump_json()``, what
Truss's ``result.json()`` is in pydantic 2), written compactly by msgspec, as every other JSON
answer of Podium's: no blanks after ``,`` and ``:`` (JSON readers see no difference; the
standard library's encoder would cost several microseconds a request). Where msgspec cannot
write a value, Truss's own encoder writes it (integers past 64 bits). Where Truss's encoder gives
up, Podium goes on as its other JSON answers do (bytes as base64, numpy booleans, datetimes,
msgspec structs, sets); a non-finite float is ``null`` (Truss writes ``NaN``, which is no JSON).
What neither can encode is :class:`~podium.errors.BadModelOutput` naming the type (a 500, as
Truss's ``Unhandled exception: TypeError: ...``).

MessagePack bodies (``content-type: application/octet-stream``) are Truss's
``truss_msgpack_serialize`` / ``truss_msgpack_deserialize`` format: ``msgpack`` with
``msgpack-numpy``'s arrays and numpy scalars, and maps with byte-string markers for datetime,
date, time, timedelta, Decimal and UUID values. The same two libraries Truss uses do the work,
imported at the first binary request, so the bytes are Truss's own.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import uuid
from decimal import Decimal
from typing import Any

import msgspec
import numpy as np

from ... import codecs
from ...errors import BadModelOutput, InvalidInput

__all__ = [
    "decode_json",
    "decode_json_for_schema",
    "decode_msgpack",
    "encode_json",
    "encode_msgpack",
    "is_pydantic",
]

_any_decoder = msgspec.json.Decoder()


# -- JSON --------------------------------------------------------------------------------------


def decode_json(body: bytes) -> Any:
    """A request's JSON body; Truss's 400 message (``Invalid JSON payload: ...``, the standard
    library's description) when it is not JSON. msgspec reads what it can (fast); the standard
    library reads the rest, as Truss does (``NaN``, integers past 64 bits)."""
    try:
        return _any_decoder.decode(body)
    except codecs.JSON_ERRORS as exc:
        problem = codecs.json_problem(exc, body)
        # not UTF-8, lone surrogates: named as Podium names them (json reads neither)
        if problem.startswith(("lone UTF-16 surrogate", "invalid UTF-8")):
            raise InvalidInput(f"Invalid JSON payload: {problem}") from None
    except RecursionError:
        pass  # (the standard library's message, and what only it reads)
    try:
        return json.loads(body)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"Invalid JSON payload: {exc}") from None
    except (UnicodeDecodeError, RecursionError) as exc:  # Truss answers 500 here; a 400 is right
        raise InvalidInput(f"Invalid JSON payload: {type(exc).__name__}: {exc}") from None


def decode_json_for_schema(body: bytes) -> Any:
    """:func:`decode_json` for a model whose input is a pydantic model: Truss hands such a body
    to the model's ``parse_raw``, so JSON that does not parse is its input parsing error, on
    the root of the input."""
    try:
        return decode_json(body)
    except InvalidInput as exc:
        why = exc.message.removeprefix("Invalid JSON payload: ")
        raise InvalidInput(f"Input Parsing Error:\n  `__root__`: {why}.") from None


def is_pydantic(value: Any) -> bool:
    """A pydantic (2) model instance, recognised without importing pydantic."""
    cls = type(value)
    return hasattr(cls, "model_fields") and hasattr(cls, "model_dump_json")


class _Encoder(json.JSONEncoder):
    """Truss's numpy rules first (``DeepNumpyEncoder``), then Podium's for what they refuse."""

    def default(self, o: Any) -> Any:
        if isinstance(o, np.integer):
            return int(o)
        if isinstance(o, np.floating):
            return float(o)
        if isinstance(o, np.ndarray):
            return o.tolist()
        if isinstance(o, bytes | bytearray | memoryview):
            return base64.b64encode(bytes(o)).decode("ascii")
        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, set | frozenset):
            return list(o)
        if isinstance(o, msgspec.Struct) or is_pydantic(o):
            try:
                if is_pydantic(o):
                    return o.model_dump(mode="json")
                return msgspec.to_builtins(o, enc_hook=codecs.json_default)
            except Exception:
                pass
        raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


_encoder = _Encoder()
_compact = msgspec.json.Encoder(enc_hook=codecs.json_default)


def encode_json(value: Any) -> bytes:
    """``value`` as Truss's server writes it (see the module docstring)."""
    if is_pydantic(value):
        return value.model_dump_json().encode()
    try:
        return _compact.encode(value)
    except (TypeError, ValueError, OverflowError, RecursionError):
        pass  # Truss's encoder, for its words or for what only it writes
    try:
        return _encoder.encode(value).encode()
    except (TypeError, ValueError, RecursionError) as exc:
        raise BadModelOutput(f"Unhandled exception: {type(exc).__name__}: {exc}") from exc


# -- MessagePack -------------------------------------------------------------------------------

# The markers of Truss's extra types: a map {marker: True, b"data": ...}.
_DATETIME, _DATE, _TIME = b"__dt_datetime_iso__", b"__dt_date_iso__", b"__dt_time_iso__"
_TIMEDELTA, _DECIMAL, _UUID, _DATA = b"__dt_timedelta__", b"__decimal__", b"__uuid__", b"data"


def _libraries() -> tuple[Any, Any]:
    try:
        import msgpack
        import msgpack_numpy
    except ImportError as exc:  # both are dependencies of Podium; a broken install says so
        raise InvalidInput(f"MessagePack bodies need {exc.name}, which is not installed") from exc
    return msgpack, msgpack_numpy


def _to_wire(obj: Any, numpy_encode: Any) -> Any:
    if isinstance(obj, dt.datetime):  # (before date: a datetime is a date)
        text = obj.isoformat()
        return {_DATETIME: True, _DATA: text[:-6] + "Z" if text.endswith("+00:00") else text}
    if isinstance(obj, dt.date):
        return {_DATE: True, _DATA: obj.isoformat()}
    if isinstance(obj, dt.time):
        if obj.utcoffset() is not None:
            raise ValueError("Cannot represent timezone-aware times.")
        return {_TIME: True, _DATA: obj.isoformat()}
    if isinstance(obj, dt.timedelta):
        return {_TIMEDELTA: True, _DATA: (obj.days, obj.seconds, obj.microseconds)}
    if isinstance(obj, Decimal):
        return {_DECIMAL: True, _DATA: str(obj)}
    if isinstance(obj, uuid.UUID):
        return {_UUID: True, _DATA: str(obj)}
    return numpy_encode(obj)


def _from_wire(obj: dict[Any, Any], numpy_decode: Any) -> Any:
    try:
        if _DATETIME in obj:
            return dt.datetime.fromisoformat(obj[_DATA])
        if _DATE in obj:
            return dt.date.fromisoformat(obj[_DATA])
        if _TIME in obj:
            return dt.time.fromisoformat(obj[_DATA])
        if _TIMEDELTA in obj:
            days, seconds, micros = obj[_DATA]
            return dt.timedelta(days=days, seconds=seconds, microseconds=micros)
        if _DECIMAL in obj:
            return Decimal(obj[_DATA])
        if _UUID in obj:
            return uuid.UUID(obj[_DATA])
    except KeyError:
        pass
    return numpy_decode(obj)


def encode_msgpack(value: Any) -> bytes:
    """``value`` in Truss's MessagePack (a pydantic model as its ``model_dump()``);
    :class:`BadModelOutput` naming what it cannot encode."""
    msgpack, msgpack_numpy = _libraries()
    if is_pydantic(value):
        value = value.model_dump(mode="python")
    numpy_encode = msgpack_numpy.encode
    try:
        return msgpack.packb(value, default=lambda obj: _to_wire(obj, numpy_encode))
    except (TypeError, ValueError, OverflowError) as exc:
        raise BadModelOutput(f"Unhandled exception: {type(exc).__name__}: {exc}") from exc


def decode_msgpack(body: bytes) -> Any:
    """A request's body in Truss's MessagePack; 400 when it is not."""
    msgpack, msgpack_numpy = _libraries()
    numpy_decode = msgpack_numpy.decode
    try:
        return msgpack.unpackb(body, object_hook=lambda obj: _from_wire(obj, numpy_decode))
    except Exception as exc:  # msgpack raises ValueError, TypeError and its own kinds
        raise InvalidInput(f"Invalid msgpack payload: {type(exc).__name__}: {exc}") from None
