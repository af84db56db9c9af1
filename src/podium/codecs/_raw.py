"""Raw tensors: the binary tensor extension of REST and the ``raw_input_contents`` /
``raw_output_contents`` of gRPC. Elements are little-endian; ``BOOL`` is one byte each, ``BF16``
the upper half of a float32, ``BYTES`` length-prefixed (:mod:`._bytes`)."""

from __future__ import annotations

import math

import numpy as np

from podium.errors import InvalidTensor, UnsupportedRepresentation
from podium.types import DATATYPES, ResponseOutput

from ._bytes import decode_raw_bytes, encode_raw_bytes
from ._datatypes import NUMPY_DTYPES, RAW_DTYPES
from ._shape import check_shape, element_count, plural, unknown_datatype

__all__ = ["decode_raw", "encode_raw"]


def decode_raw(
    name: str, datatype: str, shape: list[int], buf: bytes | memoryview
) -> np.ndarray | list[bytes]:
    """Decode one tensor from its raw little-endian bytes (OIP / Triton raw encoding).

    Fixed-size datatypes give a numpy array of the same dtype :func:`decode_input` gives,
    reshaped to ``shape``: ``BOOL`` is one byte per element (0 false, anything else true),
    ``FP16`` gives ``float16``, ``BF16`` (two bytes per element, the upper half of a float32)
    gives ``float32`` holding exactly the sent values. ``BYTES`` gives a flat ``list[bytes]``;
    each element on the wire is a 4-byte little-endian unsigned length and then that many bytes.

    Numeric arrays are views of ``buf`` (no copy) wherever the bytes can be used as they are,
    and are then **read-only** when ``buf`` is (``bytes`` always is); ``BOOL`` with bytes other
    than 0 and 1 and ``BF16`` are converted into new arrays. Keep ``buf`` alive and unchanged as
    long as the array is in use.

    Raises :class:`InvalidTensor`, naming the input, for an unknown datatype, a malformed shape,
    a byte size that is not the element count times the element size, and ``BYTES`` data that
    is truncated, holds a different number of elements than the shape, or has trailing bytes.
    """
    if not isinstance(datatype, str) or datatype not in DATATYPES:
        raise unknown_datatype(name, datatype)
    dims = check_shape(name, shape)
    count = element_count(name, dims)
    if datatype == "BYTES":
        return decode_raw_bytes(name, dims, count, buf)
    raw = RAW_DTYPES[datatype]
    needed = count * raw.itemsize
    got = memoryview(buf).nbytes
    if got != needed:
        raise InvalidTensor(
            f"input '{name}' of datatype {datatype} and shape {dims} needs "
            f"{plural(needed, 'byte')} of raw data, got {got}"
        )
    arr = np.frombuffer(buf, dtype=raw)
    if datatype == "BOOL":
        # numpy's bool must be 0 or 1; other bytes would make a bool array that misbehaves.
        arr = arr.view(np.bool_) if count == 0 or arr.max() <= 1 else arr != 0
    elif datatype == "BF16":
        arr = (arr.astype("<u4") << 16).view("<f4")
    return arr.reshape(dims)


def encode_raw(output: ResponseOutput) -> bytes:
    """The raw little-endian bytes of ``output``'s data, per its ``datatype``.

    ``data`` is a flat list (as :func:`encode_output` makes it), a nested list, or a numpy array;
    its element count must match ``shape``. ``BOOL`` is one byte per element (0 or 1); ``FP16``
    is IEEE half precision; ``BF16`` is the upper 16 bits of each value as float32, rounded to
    nearest even (a NaN stays NaN, its payload kept where bfloat16 can hold it); ``BYTES`` is
    each element as a 4-byte little-endian length followed by its bytes (``str`` elements UTF-8
    encoded).

    Raises :class:`UnsupportedRepresentation`, naming the output, for an unknown datatype, an
    element count that disagrees with the shape, or elements the datatype cannot hold.
    """
    name = output.name
    datatype = output.datatype
    data = output.data
    count = math.prod(output.shape)
    if datatype == "BYTES":
        return encode_raw_bytes(name, data, count)
    raw = RAW_DTYPES.get(datatype) if isinstance(datatype, str) else None
    if raw is None:
        raise UnsupportedRepresentation(
            f"output '{name}' has unknown datatype {datatype!r}; "
            f"expected one of: {', '.join(sorted(DATATYPES))}"
        )
    if (
        isinstance(data, np.ndarray)
        and data.dtype == raw
        and datatype not in ("BF16", "BOOL")
        and data.size == count
    ):
        return data.tobytes()  # already these bytes (e.g. a decoded input echoed back)
    target = np.dtype("<f4") if datatype == "BF16" else NUMPY_DTYPES[datatype]
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            arr = np.asarray(data, dtype=target)
    except (ValueError, TypeError, OverflowError) as exc:
        raise UnsupportedRepresentation(
            f"output '{name}' of datatype {datatype} has data that does not fit it: {exc}"
        ) from exc
    if arr.size != count:
        raise UnsupportedRepresentation(
            f"output '{name}' has shape {list(output.shape)} ({plural(count, 'element')}) "
            f"but {plural(arr.size, 'data element')}"
        )
    if datatype == "BF16":
        return _bf16_bits(arr).tobytes()
    if datatype == "BOOL":
        return arr.tobytes()  # numpy's bools are the bytes 0 and 1
    return arr.astype(raw, copy=False).tobytes()  # free on little-endian machines


def _bf16_bits(arr: np.ndarray) -> np.ndarray:
    """The bfloat16 bits of a float32 array, rounded to nearest even."""
    bits = np.ascontiguousarray(arr, dtype="<f4").view("<u4").ravel()
    rounded = (bits + (0x7FFF + ((bits >> 16) & 1))) >> 16
    # Rounding a NaN's bits could carry it into infinity (or flip its sign): cut them instead,
    # which keeps a bfloat16 NaN (a decoded input sent back) exactly, and make the NaNs whose
    # payload was all in the cut half quiet NaNs, since all-zero payload bits read as infinity.
    nan = np.isnan(arr.ravel())
    if nan.any():
        kept = bits[nan] >> 16
        rounded[nan] = np.where(kept & 0x007F, kept, kept | 0x0040)
    return rounded.astype("<u2")
