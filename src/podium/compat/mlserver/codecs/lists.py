"""Lists of strings or bytes, and single strings or bytes treated as lists of one."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

ListElement = bytes | str
ListPayload = ListElement | list[ListElement]


def is_list_of(payload: Any, instance_type: Any) -> bool:
    """Whether ``payload`` is a ``list`` whose every element is an ``instance_type`` (an empty
    list is one)."""
    return isinstance(payload, list) and all(isinstance(item, instance_type) for item in payload)


def as_list(payload: Any) -> Iterator[Any]:
    """The elements of a list, or the payload itself as the only element."""
    if isinstance(payload, list):
        yield from payload
    else:
        yield payload
