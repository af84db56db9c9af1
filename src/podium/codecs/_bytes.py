"""``BYTES`` tensors: elements given as JSON strings or bytes, and the raw form in which each
element is a 4-byte little-endian length followed by that many bytes."""

from __future__ import annotations

import struct
from typing import Any

from podium.errors import InvalidTensor, UnsupportedRepresentation
from podium.types import RequestInput

from ._shape import (
    RaggedError,
    count_error,
    describe,
    flatten,
    output_elements,
    plural,
    ragged_error,
)

__all__ = [
    "check_bytes",
    "counts_text",
    "decode_bytes",
    "decode_raw_bytes",
    "encode_raw_bytes",
]


def decode_bytes(inp: RequestInput, shape: list[int], count: int) -> list[str] | list[bytes]:
    """A ``BYTES`` input's elements (strings or bytes, nested or flat) as ``list[str]`` when its
    parameters say ``content_type: "str"``, else as ``list[bytes]`` (str UTF-8 encoded)."""
    name = inp.name
    try:
        leaves = flatten(inp.data)
    except RaggedError as exc:
        raise ragged_error(name) from exc
    if len(leaves) != count:
        raise count_error(name, shape, count, len(leaves))
    params = inp.parameters
    as_text = isinstance(params, dict) and params.get("content_type") == "str"
    # The elements already of the type asked for are kept; the others are converted.
    kept, converted, convert = (str, bytes, bytes.decode) if as_text else (bytes, str, str.encode)
    elements: list[Any] = []
    for item in leaves:
        if isinstance(item, kept):
            elements.append(item)
        elif isinstance(item, converted):
            try:
                elements.append(convert(item, "utf-8"))  # type: ignore[arg-type]
            except UnicodeError as exc:
                raise InvalidTensor(
                    f"input '{name}' has content_type 'str' but element {describe(item)} is "
                    "not valid UTF-8"
                    if as_text
                    else f"input '{name}' of datatype BYTES has element {describe(item)} that "
                    "cannot be encoded as UTF-8"
                ) from exc
        else:
            raise _bad_bytes_element(name, item)
    return elements


_TEXT_OR_BYTES = {str, bytes}
_TEXT = {str}


def counts_text(data: Any, count: int) -> bool:
    """Whether ``data`` is one string or bytes element (alone, or alone in a list) whose length
    is ``count``: in characters, or in UTF-8 bytes, for a string; in bytes for bytes. That is
    the shape MLServer's examples send for one text (``"shape": [len(text)]``), which MLServer
    takes as the one element it is (its ``StringCodec`` never reads the shape)."""
    if count == 1:
        return False  # already the one element its shape says
    if type(data) is list:
        if len(data) != 1:
            return False
        data = data[0]
    if isinstance(data, bytes):
        return len(data) == count
    if isinstance(data, str):
        if len(data) == count:
            return True
        try:
            return len(data.encode("utf-8")) == count
        except UnicodeEncodeError:
            return False
    return False


def check_bytes(inp: RequestInput, shape: list[int], count: int) -> None:
    """Raise what :func:`decode_bytes` raises for ``inp``, without making the list it returns."""
    data = inp.data
    kinds = set(map(type, data)) if type(data) is list else None
    if kinds is None or not kinds <= _TEXT_OR_BYTES:
        decode_bytes(inp, shape, count)  # nested, or an element of another type: it says which
        return
    if len(data) != count:
        raise count_error(inp.name, shape, count, len(data))
    params = inp.parameters
    if isinstance(params, dict) and params.get("content_type") == "str":
        if bytes in kinds:
            decode_bytes(inp, shape, count)  # names the element that is not UTF-8
    elif kinds == _TEXT:
        try:
            "".join(data).encode("utf-8")
        except UnicodeEncodeError:
            decode_bytes(inp, shape, count)  # names the element that cannot be encoded
    elif str in kinds:
        decode_bytes(inp, shape, count)


def _bad_bytes_element(name: str, item: Any) -> InvalidTensor:
    return InvalidTensor(
        f"input '{name}' of datatype BYTES must hold strings, but has element {describe(item)}"
    )


# The little-endian unsigned length before each BYTES element.
_LENGTH = struct.Struct("<I")


def decode_raw_bytes(
    name: str, shape: list[int], count: int, buf: bytes | memoryview
) -> list[bytes]:
    """The elements of a raw ``BYTES`` tensor: exactly ``count`` of them, nothing after."""
    view = buf if isinstance(buf, bytes) else memoryview(buf).cast("B")
    size = len(view)
    elements: list[bytes] = []
    offset = 0
    end_of_shape = 0 if count == 0 else -1  # where the element that completes the shape ends
    unpack = _LENGTH.unpack_from
    while offset < size:
        if offset + 4 > size:
            problem = (
                f"element {len(elements)} has only {size - offset} of the 4 bytes of its length"
            )
            break
        (length,) = unpack(view, offset)
        offset += 4
        if offset + length > size:
            problem = (
                f"element {len(elements)} declares {plural(length, 'byte')} "
                f"but only {size - offset} remain"
            )
            break
        elements.append(bytes(view[offset : offset + length]))
        offset += length
        if len(elements) == count:
            end_of_shape = offset
    else:
        if len(elements) != count:
            raise count_error(name, shape, count, len(elements))
        return elements
    if end_of_shape >= 0:
        raise InvalidTensor(
            f"input '{name}' of datatype BYTES and shape {shape} has "
            f"{plural(size - end_of_shape, 'trailing byte')} after its "
            f"{plural(count, 'element')}"
        )
    raise InvalidTensor(f"input '{name}' of datatype BYTES is truncated: {problem}")


def encode_raw_bytes(name: str, data: Any, count: int) -> bytes:
    """The raw form of output ``name``'s ``BYTES`` elements (str or bytes, ``count`` of them)."""
    items = output_elements(name, data)
    if len(items) != count:
        raise UnsupportedRepresentation(
            f"output '{name}' has {plural(count, 'element')} by its shape "
            f"but {plural(len(items), 'data element')}"
        )
    parts: list[bytes] = []
    pack = _LENGTH.pack
    for item in items:
        if isinstance(item, str):
            try:
                blob = item.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise UnsupportedRepresentation(
                    f"output '{name}' has element {describe(item)} that cannot be encoded as UTF-8"
                ) from exc
        elif isinstance(item, bytes | bytearray | memoryview):
            blob = bytes(item)
        else:
            raise UnsupportedRepresentation(
                f"output '{name}' of datatype BYTES must hold str or bytes, "
                f"but has element {describe(item)}"
            )
        parts.append(pack(len(blob)))
        parts.append(blob)
    return b"".join(parts)
