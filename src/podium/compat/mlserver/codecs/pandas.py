"""``PandasCodec`` (content types ``pd`` and ``pd_json``): a request as a ``pandas.DataFrame``.

MLServer's codec, with one difference that costs nothing: pandas is imported when the codec
first converts something, not when ``mlserver.codecs`` is imported (pandas takes a good part of
a second to import, and most runtimes never use it). ``can_encode`` needs no import at all: a
payload can only be a DataFrame once pandas is imported. Converting without pandas installed
raises an ``ImportError`` that says so.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

from ..types import (
    Datatype,
    InferenceRequest,
    InferenceResponse,
    Parameters,
    ResponseOutput,
)
from .base import RequestCodec, as_input, register_request_codec
from .json import decode_json_input_or_output, encode_to_json
from .numpy import to_datatype, to_dtype
from .string import StringCodec, encode_str
from .utils import get_decoded_or_raw, has_decoded, inject_batch_dimension

__all__ = ["PandasCodec"]


def _pandas() -> Any:
    try:
        import pandas
    except ImportError as exc:
        raise ImportError(
            "mlserver.codecs.PandasCodec needs pandas, which is not installed (pip install pandas)"
        ) from exc
    return pandas


class _NoDataFrame:
    """What ``PandasCodec.TypeHint`` is while pandas is not imported: no type hint equals it."""


class _DataFrameType:
    """``PandasCodec.TypeHint``: ``pandas.DataFrame`` once pandas is imported (a runtime whose
    type hints name DataFrame has imported it), without importing it."""

    def __get__(self, instance: object, owner: type | None = None) -> type:
        pandas = sys.modules.get("pandas")
        return pandas.DataFrame if pandas is not None else _NoDataFrame


def _to_series(pd: Any, input_or_output: Any) -> Any:
    parameters = input_or_output.parameters
    if parameters and parameters.content_type == PandasCodec.JsonContentType:
        return pd.Series(decode_json_input_or_output(input_or_output))
    payload = get_decoded_or_raw(input_or_output)
    if not has_decoded(input_or_output):
        payload = getattr(payload, "root", payload)  # the TensorData's elements
    if Datatype(input_or_output.datatype) == Datatype.BYTES:
        return pd.Series(payload)  # BYTES keep their Python type
    if isinstance(payload, np.ndarray):
        payload = payload.reshape(input_or_output.shape[0], 1).squeeze(axis=1)
    return pd.Series(payload, dtype=to_dtype(input_or_output))


def _process_bytes(data: list[Any], use_bytes: bool) -> tuple[list[Any], str | None]:
    # A column of strings goes out as BYTES with content type "str" (gRPC needs bytes); a
    # column with anything else in it has no content type and is sent as JSON elements.
    processed: list[Any] = []
    content_type: str | None = StringCodec.ContentType
    for element in data:
        converted = element
        if not isinstance(element, (str, bytes)):
            content_type = None
        elif isinstance(element, str) and use_bytes:
            converted = encode_str(element)
        processed.append(converted)
    return processed, content_type


def _datatype(dtype: Any) -> Datatype:
    # pandas >= 3 keeps text in its own "str" dtype (kind "O", not a numpy dtype): BYTES, as a
    # column of Python strings. (MLServer 1.7 raises KeyError('O') on such a column.)
    if getattr(dtype, "kind", None) == "O":
        return Datatype.BYTES
    return to_datatype(dtype)


def _missing_as_none(value: Any) -> Any:
    # NaN, None and pd.NA all mean "missing"; JSON has only null. (MLServer's convert_nan calls
    # np.isnan on every element, which raises on the strings of a text column with a gap.)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    pandas = sys.modules.get("pandas")
    return None if pandas is not None and value is pandas.NA else value


def _to_response_output(series: Any, use_bytes: bool = True) -> ResponseOutput:
    datatype = _datatype(series.dtype)
    data = series.tolist()
    if series.isnull().any():  # JSON has no NaN: null instead
        data = [_missing_as_none(v) for v in data]
    content_type = None
    if datatype == Datatype.BYTES:
        processed, content_type = _process_bytes(data, use_bytes)
        if content_type is None:
            data = [encode_to_json(element, use_bytes) for element in data]
            content_type = PandasCodec.JsonContentType
        else:
            data = processed
    return ResponseOutput(
        name=series.name,
        shape=inject_batch_dimension(list(series.shape)),
        data=data,
        datatype=datatype,
        parameters=Parameters(content_type=content_type) if content_type else None,
    )


@register_request_codec
class PandasCodec(RequestCodec):
    """A request (response) as a DataFrame: each input (output) is one column."""

    ContentType = "pd"
    JsonContentType = "pd_json"
    TypeHint = _DataFrameType()

    @classmethod
    def can_encode(cls, payload: Any) -> bool:
        pandas = sys.modules.get("pandas")
        return pandas is not None and isinstance(payload, pandas.DataFrame)

    @classmethod
    def encode_response(
        cls,
        model_name: str,
        payload: Any,
        model_version: str | None = None,
        use_bytes: bool = True,
        **kwargs: Any,
    ) -> InferenceResponse:
        return InferenceResponse(
            model_name=model_name,
            model_version=model_version,
            parameters=Parameters(content_type=cls.ContentType),
            outputs=cls.encode_outputs(payload, use_bytes=use_bytes),
        )

    @classmethod
    def decode_response(cls, response: InferenceResponse) -> Any:
        pd = _pandas()
        return pd.DataFrame({output.name: _to_series(pd, output) for output in response.outputs})

    @classmethod
    def encode_outputs(cls, payload: Any, use_bytes: bool = True) -> list[ResponseOutput]:
        """One output per column of the DataFrame ``payload``."""
        return [_to_response_output(payload[column], use_bytes=use_bytes) for column in payload]

    @classmethod
    def encode_request(
        cls, payload: Any, use_bytes: bool = True, **kwargs: Any
    ) -> InferenceRequest:
        outputs = cls.encode_outputs(payload, use_bytes=use_bytes)
        return InferenceRequest(
            parameters=Parameters(content_type=cls.ContentType),
            inputs=[as_input(output) for output in outputs],
        )

    @classmethod
    def decode_request(cls, request: InferenceRequest) -> Any:
        pd = _pandas()
        return pd.DataFrame({inp.name: _to_series(pd, inp) for inp in request.inputs})
