"""``Base64Codec`` (content type ``base64``): a list of ``bytes`` as base64-encoded BYTES."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from ..types import Datatype, Parameters, RequestInput, ResponseOutput, TensorData
from .base import InputCodec, register_input_codec
from .lists import as_list, is_list_of

__all__ = ["Base64Codec"]


def _as_bytes(elem: Any) -> bytes:
    return elem.encode("ascii") if isinstance(elem, str) else elem


def _encode(elem: Any, use_bytes: bool) -> bytes | str:
    encoded = base64.b64encode(_as_bytes(elem))
    return encoded if use_bytes else encoded.decode("ascii")


def _decode(elem: Any) -> bytes:
    raw = _as_bytes(elem)
    try:
        return base64.b64decode(raw, validate=True)
    except binascii.Error:
        return raw  # not base64: taken as the bytes themselves, as MLServer does


def _decode_all(tensor: Any) -> list[bytes]:
    return [_decode(elem) for elem in as_list(tensor.data.root)]


@register_input_codec
class Base64Codec(InputCodec):
    """A list of ``bytes`` ↔ a BYTES tensor ``[N, 1]`` of their base64 encodings."""

    ContentType = "base64"
    TypeHint = list[bytes]

    @classmethod
    def can_encode(cls, payload: Any) -> bool:
        return is_list_of(payload, bytes)

    @classmethod
    def encode_output(
        cls, name: str, payload: list[bytes], use_bytes: bool = True, **kwargs: Any
    ) -> ResponseOutput:
        return ResponseOutput(
            name=name,
            datatype=Datatype.BYTES,
            shape=[len(payload), 1],
            data=TensorData([_encode(elem, use_bytes) for elem in payload]),
            parameters=Parameters(content_type=cls.ContentType),
        )

    @classmethod
    def decode_output(cls, response_output: ResponseOutput) -> list[bytes]:
        return _decode_all(response_output)

    @classmethod
    def encode_input(
        cls, name: str, payload: list[bytes], use_bytes: bool = True, **kwargs: Any
    ) -> RequestInput:
        output = cls.encode_output(name, payload, use_bytes)
        return RequestInput(
            name=output.name,
            datatype=output.datatype,
            shape=output.shape,
            data=output.data,
            parameters=Parameters(content_type=cls.ContentType),
        )

    @classmethod
    def decode_input(cls, request_input: RequestInput) -> list[bytes]:
        return _decode_all(request_input)
