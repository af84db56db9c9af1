"""``Base64Codec`` (content type ``base64``): a list of ``bytes`` as base64-encoded BYTES."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from .base import ElementsCodec, register_input_codec
from .lists import is_list_of

__all__ = ["Base64Codec"]


def _as_bytes(elem: Any) -> bytes:
    return elem.encode("ascii") if isinstance(elem, str) else elem


@register_input_codec
class Base64Codec(ElementsCodec):
    """A list of ``bytes`` ↔ a BYTES tensor ``[N, 1]`` of their base64 encodings."""

    ContentType = "base64"
    TypeHint = list[bytes]

    @classmethod
    def can_encode(cls, payload: Any) -> bool:
        return is_list_of(payload, bytes)

    @classmethod
    def _encode(cls, elem: Any, use_bytes: bool) -> bytes | str:
        encoded = base64.b64encode(_as_bytes(elem))
        return encoded if use_bytes else encoded.decode("ascii")

    @classmethod
    def _decode(cls, elem: Any) -> bytes:
        raw = _as_bytes(elem)
        try:
            return base64.b64decode(raw, validate=True)
        except binascii.Error:
            return raw  # not base64: taken as the bytes themselves, as MLServer does
