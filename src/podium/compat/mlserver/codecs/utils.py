"""Content-type driven decoding and payload driven encoding, as ``MLModel`` helpers use them.

A decoded value is remembered on the object's parameters (``_decoded_payload``), so decoding the
same input twice returns the same value and a request codec can reuse its inputs' values.
"""

from __future__ import annotations

from typing import Any, TypeAlias

from ..settings import ModelSettings
from ..types import (
    InferenceRequest,
    InferenceResponse,
    MetadataTensor,
    Parameters,
    RequestInput,
    RequestOutput,
    ResponseOutput,
)
from .base import (
    InputCodecLike,
    RequestCodec,
    RequestCodecLike,
    find_input_codec,
    find_input_codec_by_payload,
    find_request_codec,
    find_request_codec_by_payload,
)
from .errors import CodecError

__all__ = [
    "Codec",
    "DecodedParameterName",
    "DefaultInputPrefix",
    "DefaultOutputPrefix",
    "InputOrOutput",
    "Parametrised",
    "SingleInputRequestCodec",
    "Tagged",
    "decode_inference_request",
    "decode_request_input",
    "encode_inference_response",
    "encode_response_output",
    "get_decoded",
    "get_decoded_or_raw",
    "has_decoded",
    "inject_batch_dimension",
]

#: What a tensor codec reads and writes: a request's input or a response's output.
InputOrOutput: TypeAlias = RequestInput | ResponseOutput
Codec: TypeAlias = InputCodecLike | RequestCodecLike
#: Whatever carries ``parameters`` (a content type, a decoded payload).
Parametrised: TypeAlias = (
    InferenceRequest | RequestInput | RequestOutput | ResponseOutput | InferenceResponse
)
#: Whatever names a content type for what it describes.
Tagged: TypeAlias = MetadataTensor | ModelSettings

DefaultOutputPrefix = "output-"
DefaultInputPrefix = "input-"
DecodedParameterName = "_decoded_payload"


def inject_batch_dimension(shape: list[int]) -> list[int]:
    """A 1-D shape ``[N]`` as ``[N, 1]``; other shapes unchanged."""
    return shape if len(shape) > 1 else [*shape, 1]


def _content_type(obj: Any, metadata: Any = None) -> str | None:
    if obj.parameters is not None and obj.parameters.content_type:
        return str(obj.parameters.content_type)
    if metadata is not None and metadata.parameters and metadata.parameters.content_type:
        return str(metadata.parameters.content_type)
    return None


def _save_decoded(obj: Any, decoded: Any) -> None:
    if not obj.parameters:
        obj.parameters = Parameters()
    setattr(obj.parameters, DecodedParameterName, decoded)


def has_decoded(obj: Any) -> bool:
    """Whether a value decoded from ``obj`` was remembered on it."""
    return bool(obj.parameters) and hasattr(obj.parameters, DecodedParameterName)


def get_decoded(obj: Any) -> Any:
    """The value remembered on ``obj`` (``None`` if there is none)."""
    if has_decoded(obj):
        return getattr(obj.parameters, DecodedParameterName)
    return None


def get_decoded_or_raw(obj: Any) -> Any:
    """The remembered value; else a tensor's ``data``, or the object itself."""
    if has_decoded(obj):
        return get_decoded(obj)
    if hasattr(obj, "data") and hasattr(obj, "datatype"):
        return obj.data
    return obj


def encode_response_output(
    payload: Any, request_output: Any, metadata_outputs: dict[str, Any] | None = None
) -> Any:
    """``payload`` as a ``ResponseOutput`` named as ``request_output``, by the output's content
    type (its parameters, else the model's metadata), else by the payload's type; ``None`` when
    no codec fits."""
    metadata = (metadata_outputs or {}).get(request_output.name)
    content_type = _content_type(request_output, metadata)
    codec = find_input_codec(content_type) if content_type else find_input_codec_by_payload(payload)
    if codec is None:
        return None
    return codec.encode_output(name=request_output.name, payload=payload)


def encode_inference_response(payload: Any, model_settings: Any) -> InferenceResponse | None:
    """``payload`` as a whole response by the request codec that can encode it; ``None`` if
    none can."""
    codec = find_request_codec_by_payload(payload)
    if codec is None:
        return None
    version = model_settings.parameters.version if model_settings.parameters else None
    response: InferenceResponse = codec.encode_response(model_settings.name, payload, version)
    return response


def decode_request_input(request_input: Any, metadata_inputs: dict[str, Any] | None = None) -> Any:
    """Decode one input by its content type (its parameters, else the model's metadata) and
    remember the value; ``None`` when it has no content type or no codec is registered for it."""
    metadata = (metadata_inputs or {}).get(request_input.name)
    content_type = _content_type(request_input, metadata)
    if content_type is None:
        return None
    codec = find_input_codec(content_type)
    if codec is None:
        return None
    decoded = codec.decode_input(request_input)
    _save_decoded(request_input, decoded)
    return decoded


def decode_inference_request(
    inference_request: Any,
    model_settings: Any = None,
    metadata_inputs: dict[str, Any] | None = None,
) -> Any:
    """Decode every input that has a content type, then the whole request by the request's
    content type (else the model's default ``parameters.content_type``); returns the decoded
    value, or the request itself when no request codec applies."""
    for request_input in inference_request.inputs:
        decode_request_input(request_input, metadata_inputs)
    content_type = _content_type(inference_request, model_settings)
    if content_type is not None:
        codec = find_request_codec(content_type)
        if codec is not None:
            decoded = codec.decode_request(inference_request)
            _save_decoded(inference_request, decoded)
            return decoded
    return inference_request


class SingleInputRequestCodec(RequestCodec):
    """A request codec that is one input codec applied to a request's only input (or a
    response's only output)."""

    InputCodec: Any = None

    @classmethod
    def can_encode(cls, payload: Any) -> bool:
        return cls.InputCodec is not None and bool(cls.InputCodec.can_encode(payload))

    @classmethod
    def _input_codec(cls) -> Any:
        if cls.InputCodec is None:
            raise NotImplementedError(f"No input codec found for {type(cls)} request codec")
        return cls.InputCodec

    @classmethod
    def encode_response(
        cls, model_name: str, payload: Any, model_version: str | None = None, **kwargs: Any
    ) -> InferenceResponse:
        output = cls._input_codec().encode_output(f"{DefaultOutputPrefix}1", payload, **kwargs)
        return InferenceResponse(
            model_name=model_name,
            model_version=model_version,
            parameters=Parameters(content_type=cls.ContentType),
            outputs=[output],
        )

    @classmethod
    def decode_response(cls, response: InferenceResponse) -> Any:
        return cls._decode_only(response.outputs, "output", "decode_output")

    @classmethod
    def encode_request(cls, payload: Any, **kwargs: Any) -> InferenceRequest:
        inp = cls._input_codec().encode_input(f"{DefaultInputPrefix}1", payload, **kwargs)
        return InferenceRequest(inputs=[inp], parameters=Parameters(content_type=cls.ContentType))

    @classmethod
    def decode_request(cls, request: InferenceRequest) -> Any:
        return cls._decode_only(request.inputs, "input", "decode_input")

    @classmethod
    def _decode_only(cls, tensors: list[Any], what: str, method: str) -> Any:
        """The only tensor of ``tensors`` decoded by the input codec's ``method`` (remembered
        on it), or as it is when there is no input codec."""
        if len(tensors) != 1:
            raise CodecError(
                f"The '{cls.ContentType}' codec only supports a single {what} tensor "
                f"({len(tensors)} were received)"
            )
        first = tensors[0]
        if not has_decoded(first) and cls.InputCodec is not None:
            _save_decoded(first, getattr(cls.InputCodec, method)(first))
        return get_decoded_or_raw(first)
