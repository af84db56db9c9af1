"""``mlserver.codecs.json``: JSON helpers of the codecs (``pd_json`` columns, JSON bodies).

As MLServer's: ``encode_to_json`` writes compact JSON that knows numpy arrays and scalars;
``encode_to_json_bytes`` also writes ``bytes`` values (as their text, best effort).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from .lists import as_list
from .string import decode_str

__all__ = [
    "JSONEncoderWithArray",
    "decode_from_bytelike_json_to_dict",
    "decode_json_input_or_output",
    "encode_to_json",
    "encode_to_json_bytes",
]


class JSONEncoderWithArray(json.JSONEncoder):
    """A JSON encoder that writes numpy arrays as lists and numpy scalars as numbers."""

    def default(self, o: Any) -> Any:
        if isinstance(o, np.ndarray):
            return o.tolist()
        if isinstance(o, np.floating):
            return float(o)
        if isinstance(o, np.integer):
            return int(o)
        return super().default(o)


class _BytesJSONEncoder(json.JSONEncoder):
    def default(self, o: Any) -> Any:
        if isinstance(o, bytes):
            return decode_str(o)
        return super().default(o)


def _compact(v: Any, encoder: type[json.JSONEncoder]) -> str:
    return json.dumps(
        v, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":"), cls=encoder
    )


def encode_to_json(v: Any, use_bytes: bool = True) -> str | bytes:
    """``v`` as compact JSON (UTF-8 bytes unless ``use_bytes`` is false); NaN is an error."""
    text = _compact(v, JSONEncoderWithArray)
    return text.encode("utf-8") if use_bytes else text


def encode_to_json_bytes(v: Any) -> bytes:
    """``v`` as compact JSON bytes; ``bytes`` values are written as their (UTF-8) text."""
    return _compact(v, _BytesJSONEncoder).encode("utf-8")


def decode_from_bytelike_json_to_dict(v: bytes | str) -> Any:
    return json.loads(v)


def decode_json_input_or_output(input_or_output: Any) -> list[Any]:
    """Each element of a tensor parsed as JSON (the ``pd_json`` content type)."""
    packed = getattr(input_or_output.data, "root", input_or_output.data)
    return [json.loads(element) for element in as_list(packed)]
