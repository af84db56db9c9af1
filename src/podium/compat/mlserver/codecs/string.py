"""``StringCodec`` (content type ``str``): a list of Python strings as a BYTES tensor."""

from __future__ import annotations

from typing import Any

from ..types import Datatype, Parameters, RequestInput, ResponseOutput, TensorData
from .base import InputCodec, register_input_codec, register_request_codec
from .lists import as_list, is_list_of
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


def _decode(tensor: Any) -> list[str]:
    return [decode_str(item) for item in as_list(tensor.data.root)]


@register_input_codec
class StringCodec(InputCodec):
    """A list of ``str`` ↔ a BYTES tensor of shape ``[N, 1]`` (elements UTF-8 encoded)."""

    ContentType = "str"
    TypeHint = list[str]

    @classmethod
    def can_encode(cls, payload: Any) -> bool:
        return is_list_of(payload, str)

    @classmethod
    def encode_output(
        cls, name: str, payload: list[str], use_bytes: bool = True, **kwargs: Any
    ) -> ResponseOutput:
        data: list[Any] = [encode_str(s) for s in payload] if use_bytes else list(payload)
        return ResponseOutput(
            name=name,
            datatype=Datatype.BYTES,
            shape=[len(payload), 1],
            data=TensorData(data),
            parameters=Parameters(content_type=cls.ContentType),
        )

    @classmethod
    def decode_output(cls, response_output: ResponseOutput) -> list[str]:
        return _decode(response_output)

    @classmethod
    def encode_input(
        cls, name: str, payload: list[str], use_bytes: bool = True, **kwargs: Any
    ) -> RequestInput:
        output = cls.encode_output(name, payload, use_bytes)
        return RequestInput(
            name=output.name,
            datatype=output.datatype,
            shape=output.shape,
            data=output.data,
            parameters=output.parameters,
        )

    @classmethod
    def decode_input(cls, request_input: RequestInput) -> list[str]:
        return _decode(request_input)


@register_request_codec
class StringRequestCodec(SingleInputRequestCodec):
    """A request's only input (a response's only output) as a list of ``str``."""

    InputCodec = StringCodec
    ContentType = StringCodec.ContentType
    TypeHint = list[str]
