"""``DatetimeCodec`` (content type ``datetime``): datetimes as ISO 8601 BYTES."""

from __future__ import annotations

import datetime as _dt
from typing import Any

from ..types import Datatype, Parameters, RequestInput, ResponseOutput, TensorData
from .base import InputCodec, register_input_codec
from .lists import as_list, is_list_of

__all__ = ["DatetimeCodec"]


def _encode(elem: Any, use_bytes: bool) -> bytes | str:
    iso = elem if isinstance(elem, str) else elem.isoformat()
    return iso.encode("ascii") if use_bytes else iso


def _decode(elem: Any) -> _dt.datetime:
    text = elem if isinstance(elem, str) else elem.decode("ascii")
    return _dt.datetime.fromisoformat(text)


@register_input_codec
class DatetimeCodec(InputCodec):
    """A list of ``datetime`` ↔ a BYTES tensor ``[N, 1]`` of ISO 8601 strings."""

    ContentType = "datetime"
    TypeHint = list[str | _dt.datetime]

    @classmethod
    def can_encode(cls, payload: Any) -> bool:
        return is_list_of(payload, _dt.datetime)

    @classmethod
    def encode_output(
        cls, name: str, payload: list[Any], use_bytes: bool = True, **kwargs: Any
    ) -> ResponseOutput:
        return ResponseOutput(
            name=name,
            datatype=Datatype.BYTES,
            shape=[len(payload), 1],
            data=TensorData([_encode(elem, use_bytes) for elem in payload]),
            parameters=Parameters(content_type=cls.ContentType),
        )

    @classmethod
    def decode_output(cls, response_output: ResponseOutput) -> list[_dt.datetime]:
        return [_decode(e) for e in as_list(response_output.data.root)]

    @classmethod
    def encode_input(
        cls, name: str, payload: list[Any], use_bytes: bool = True, **kwargs: Any
    ) -> RequestInput:
        output = cls.encode_output(name, payload, use_bytes=use_bytes)
        return RequestInput(
            name=output.name,
            datatype=output.datatype,
            shape=output.shape,
            data=output.data,
            parameters=Parameters(content_type=cls.ContentType),
        )

    @classmethod
    def decode_input(cls, request_input: RequestInput) -> list[_dt.datetime]:
        return [_decode(e) for e in as_list(request_input.data.root)]
