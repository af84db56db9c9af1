"""The numpy side of OIP datatypes: the dtype each one decodes to, the datatype each numpy
dtype encodes as, and the exact little-endian dtype of each one's raw elements."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["DATATYPE_OF", "NUMPY_DTYPES", "RAW_DTYPES"]


#: The numpy dtype each numeric datatype decodes to (BF16: float32, as numpy has no bfloat16).
NUMPY_DTYPES: dict[str, np.dtype[Any]] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BF16": np.dtype(np.float32),
}


#: The datatype a numpy dtype encodes as, keyed by (kind, itemsize) rather than dtype so that
#: byte order does not matter.
DATATYPE_OF: dict[tuple[str, int], str] = {
    (dtype.kind, dtype.itemsize): name for name, dtype in NUMPY_DTYPES.items() if name != "BF16"
}


#: The exact little-endian dtype of each fixed-size datatype's raw elements (BOOL: its bytes, 0
#: or 1; BF16: its bits).
RAW_DTYPES: dict[str, np.dtype[Any]] = {
    **{name: dtype.newbyteorder("<") for name, dtype in NUMPY_DTYPES.items()},
    "BOOL": np.dtype("u1"),
    "BF16": np.dtype("<u2"),
}
