"""What every codec checks the same way: a tensor's shape, its elements in row-major order
(nested lists flattened), and the words of the errors about them."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from podium.errors import InvalidTensor, UnsupportedRepresentation
from podium.types import DATATYPES

__all__ = [
    "RaggedError",
    "check_shape",
    "count_error",
    "describe",
    "element_count",
    "flatten",
    "leaves_of",
    "output_elements",
    "plural",
    "ragged_error",
    "unknown_datatype",
]


class RaggedError(ValueError):
    """Nested lists whose lengths disagree."""


def check_shape(name: str, shape: Any) -> list[int]:
    """``shape`` as a list of ints, or :class:`InvalidTensor` naming input ``name``."""
    if type(shape) is list:
        # The common case, a list of Python ints as msgspec and protobuf give it: a loop over
        # the few dimensions costs a fifth of the general test below.
        for dim in shape:
            if type(dim) is not int or dim < 0:
                break
        else:
            return shape
    if isinstance(shape, list | tuple) and all(
        isinstance(dim, int | np.integer) and not isinstance(dim, bool) and dim >= 0
        for dim in shape
    ):
        return [int(dim) for dim in shape]
    raise InvalidTensor(
        f"input '{name}' has shape {shape!r}; a shape must be a list of non-negative integers"
    )


# numpy refuses a shape whose non-zero dimensions multiply to more bytes than an address can
# count, even when a zero dimension makes the array empty; 8 bytes is the largest element.
_MAX_ELEMENTS = int(np.iinfo(np.intp).max) // 8


def element_count(name: str, shape: list[int]) -> int:
    """The number of elements of a checked ``shape``, or :class:`InvalidTensor` naming input
    ``name`` when no array can have that shape (a 0-size one included)."""
    count = math.prod(shape)
    if count > _MAX_ELEMENTS or (
        count == 0 and math.prod(dim for dim in shape if dim) > _MAX_ELEMENTS
    ):
        raise InvalidTensor(
            f"input '{name}' has shape {shape}, larger than any tensor can be "
            f"(at most {_MAX_ELEMENTS} elements, 0-size dimensions aside)"
        )
    return count


def count_error(name: str, shape: list[int], count: int, got: int) -> InvalidTensor:
    """The error for an input whose element count disagrees with its shape."""
    return InvalidTensor(
        f"input '{name}' has shape {shape} ({plural(count, 'element')}) "
        f"but {plural(got, 'data element')}"
    )


def plural(n: int, noun: str) -> str:
    """``"1 byte"``, ``"2 bytes"``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def ragged_error(name: str) -> InvalidTensor:
    """The error for an input whose nested lists are not rectangular."""
    return InvalidTensor(
        f"input '{name}' has ragged data: nested lists must be rectangular (row-major)"
    )


def describe(item: Any) -> str:
    """An element as an error message shows it: its repr, cut at 40 characters, and its type."""
    if item is None:
        return "null"
    text = repr(item)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{text} ({type(item).__name__})"


def leaves_of(data: Any, arr: np.ndarray) -> list[Any]:
    """The original elements of ``data`` (``arr`` is numpy's reading of it), row-major."""
    try:
        return flatten(data)
    except RaggedError:
        return list(arr.ravel().tolist())


def flatten(data: Any) -> list[Any]:
    """Flatten a rectangular nested list in row-major order; a non-list is one element."""
    if isinstance(data, np.ndarray):
        return list(data.ravel().tolist())
    if not isinstance(data, list | tuple):
        return [data]
    level: list[Any] = list(data)
    while level and isinstance(level[0], list | tuple):
        width = len(level[0])
        below: list[Any] = []
        for item in level:
            if not isinstance(item, list | tuple) or len(item) != width:
                raise RaggedError
            below.extend(item)
        level = below
    if any(isinstance(item, list | tuple) for item in level):
        raise RaggedError
    return level


def output_elements(name: str, data: Any) -> list[Any]:
    """Output ``name``'s elements in row-major order (numpy's as Python values);
    :class:`UnsupportedRepresentation` when its nested lists are ragged."""
    if isinstance(data, np.generic):
        return [data.item()]
    try:
        return flatten(data)
    except RaggedError as exc:
        raise UnsupportedRepresentation(
            f"output '{name}' has ragged data; a tensor must be rectangular"
        ) from exc


def unknown_datatype(name: str, datatype: Any) -> InvalidTensor:
    """The error for an input whose datatype OIP does not define."""
    return InvalidTensor(
        f"input '{name}' has unknown datatype {datatype!r}; "
        f"expected one of: {', '.join(sorted(DATATYPES))}"
    )
