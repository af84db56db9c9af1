"""``DatetimeCodec`` (content type ``datetime``): datetimes as ISO 8601 BYTES."""

from __future__ import annotations

import datetime as _dt
from typing import Any

from .base import ElementsCodec, register_input_codec
from .lists import is_list_of

__all__ = ["DatetimeCodec"]


@register_input_codec
class DatetimeCodec(ElementsCodec):
    """A list of ``datetime`` ↔ a BYTES tensor ``[N, 1]`` of ISO 8601 strings."""

    ContentType = "datetime"
    TypeHint = list[str | _dt.datetime]

    @classmethod
    def can_encode(cls, payload: Any) -> bool:
        return is_list_of(payload, _dt.datetime)

    @classmethod
    def _encode(cls, elem: Any, use_bytes: bool) -> bytes | str:
        iso = elem if isinstance(elem, str) else elem.isoformat()
        return iso.encode("ascii") if use_bytes else iso

    @classmethod
    def _decode(cls, elem: Any) -> _dt.datetime:
        text = elem if isinstance(elem, str) else elem.decode("ascii")
        return _dt.datetime.fromisoformat(text)
