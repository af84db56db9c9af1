"""``NumpyCodec`` (content type ``np``): a tensor as a numpy array of its datatype and shape."""

from __future__ import annotations

from typing import Any

import numpy as np

from ....codecs import NUMPY_DTYPES
from ..types import Datatype, Parameters, RequestInput, ResponseOutput, TensorData
from .base import InputCodec, as_input, register_input_codec, register_request_codec
from .lists import is_list_of
from .string import encode_str
from .utils import SingleInputRequestCodec, inject_batch_dimension

__all__ = ["NumpyCodec", "NumpyRequestCodec", "convert_nan", "to_datatype", "to_dtype"]

#: The numpy dtype of each datatype MLServer knows, by name: Podium's (no BF16, which MLServer
#: does not know), and BYTES as fixed-size bytes.
_NUMPY_OF: dict[str, str] = {
    **{datatype: dtype.name for datatype, dtype in NUMPY_DTYPES.items() if datatype != "BF16"},
    "BYTES": "bytes",
}
_DATATYPE_OF: dict[str, str] = {
    **{numpy_name: datatype for datatype, numpy_name in _NUMPY_OF.items()},
    "object": "BYTES",
    "S": "BYTES",
    "U": "BYTES",
}


def _datatype_name(datatype: Any) -> str:
    return str(getattr(datatype, "value", datatype))


def _data(tensor: Any) -> Any:
    return getattr(tensor.data, "root", tensor.data)


def to_dtype(tensor: Any) -> np.dtype[Any]:
    """The numpy dtype of a tensor: BYTES of ``str`` elements is a unicode dtype; other BYTES a
    fixed-size bytes dtype as wide as the last dimension."""
    datatype = _datatype_name(tensor.datatype)
    name = _NUMPY_OF[datatype]
    if datatype == "BYTES":
        if is_list_of(_data(tensor), str):
            return np.dtype(str)
        return np.dtype((name, tensor.shape[-1]))
    return np.dtype(name)


def to_datatype(dtype: np.dtype[Any]) -> Datatype:
    """The OIP datatype of a numpy dtype (strings, bytes and objects are BYTES)."""
    key = str(dtype)
    if key not in _DATATYPE_OF:
        key = dtype.kind
    return Datatype(_DATATYPE_OF[key])


def _to_ndarray(tensor: Any) -> np.ndarray:
    data = _data(tensor)
    dtype = to_dtype(tensor)
    if _datatype_name(tensor.datatype) == "BYTES" and is_list_of(data, bytes):
        # Each element is a buffer of fixed-size items; they are read and joined.
        return np.concatenate([np.frombuffer(buffer, dtype) for buffer in data])
    return np.array(data, dtype)


def convert_nan(value: Any) -> Any:
    return None if np.isnan(value) else value


def _encode_data(array: np.ndarray, datatype: Datatype) -> list[Any]:
    if datatype == Datatype.BYTES:
        if np.issubdtype(array.dtype, str):
            return [encode_str(s) for s in array.flatten().tolist()]
        if np.issubdtype(array.dtype, bytes):
            return [array.tobytes()]  # one buffer of fixed-size items, as MLServer sends it
        return list(array.flatten().tolist())
    values = array.flatten().tolist()
    if np.isnan(array).any():  # JSON has no NaN: null instead
        values = [convert_nan(v) for v in values]
    return list(values)


@register_input_codec
class NumpyCodec(InputCodec):
    """A tensor ↔ a numpy array (a 1-D array is sent with shape ``[N, 1]``)."""

    ContentType = "np"
    TypeHint = np.ndarray

    @classmethod
    def can_encode(cls, payload: Any) -> bool:
        return isinstance(payload, np.ndarray)

    @classmethod
    def encode_output(cls, name: str, payload: np.ndarray, **kwargs: Any) -> ResponseOutput:
        datatype = to_datatype(payload.dtype)
        return ResponseOutput(
            name=name,
            datatype=datatype,
            shape=inject_batch_dimension(list(payload.shape)),
            data=TensorData(_encode_data(payload, datatype)),
            parameters=Parameters(content_type=cls.ContentType),
        )

    @classmethod
    def decode_output(cls, response_output: ResponseOutput) -> np.ndarray:
        return cls.decode_input(response_output)  # type: ignore[arg-type]

    @classmethod
    def encode_input(cls, name: str, payload: np.ndarray, **kwargs: Any) -> RequestInput:
        return as_input(cls.encode_output(name=name, payload=payload))

    @classmethod
    def decode_input(cls, request_input: RequestInput) -> np.ndarray:
        return _to_ndarray(request_input).reshape(request_input.shape)


@register_request_codec
class NumpyRequestCodec(SingleInputRequestCodec):
    """A request's only input (a response's only output) as a numpy array."""

    InputCodec = NumpyCodec
    ContentType = NumpyCodec.ContentType
