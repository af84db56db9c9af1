"""``StringCodec`` (content type ``str``): a list of Python strings as a BYTES tensor."""

from __future__ import annotations

from typing import Any

from .base import ElementsCodec, register_input_codec, register_request_codec
from .lists import is_list_of
from .utils import SingleInputRequestCodec

__all__ = ["StringCodec", "StringRequestCodec", "decode_str", "encode_str"]

_ENCODING = "utf-8"


def encode_str(elem: str) -> bytes:
    return elem.encode(_ENCODING)


def decode_str(encoded: Any, str_codec: str = _ENCODING) -> Any:
    """``bytes`` decoded, a ``str`` as it is (JSON gives text), ``None`` as ``None``; anything
    else becomes ``""`` (MLServer's rule)."""
    if encoded is None:
        return None
    if isinstance(encoded, bytes):
        return encoded.decode(str_codec)
    if isinstance(encoded, str):
        return encoded
    return ""


@register_input_codec
class StringCodec(ElementsCodec):
    """A list of ``str`` ↔ a BYTES tensor of shape ``[N, 1]`` (elements UTF-8 encoded)."""

    ContentType = "str"
    TypeHint = list[str]

    @classmethod
    def can_encode(cls, payload: Any) -> bool:
        return is_list_of(payload, str)

    @classmethod
    def _encode(cls, elem: str, use_bytes: bool) -> Any:
        return encode_str(elem) if use_bytes else elem

    @classmethod
    def _decode(cls, elem: Any) -> Any:
        return decode_str(elem)


@register_request_codec
class StringRequestCodec(SingleInputRequestCodec):
    """A request's only input (a response's only output) as a list of ``str``."""

    InputCodec = StringCodec
    ContentType = StringCodec.ContentType
    TypeHint = list[str]
