"""Codec interfaces and the registry that finds a codec by content type, payload or type hint."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ClassVar, TypeAlias

from ..logging import logger
from ..types import (
    Datatype,
    InferenceRequest,
    InferenceResponse,
    Parameters,
    RequestInput,
    ResponseOutput,
    TensorData,
)
from .lists import as_list

__all__ = [
    "InputCodec",
    "InputCodecLike",
    "RequestCodec",
    "RequestCodecLike",
    "deprecated",
    "find_input_codec",
    "find_input_codec_by_payload",
    "find_input_codec_by_type_hint",
    "find_request_codec",
    "find_request_codec_by_payload",
    "find_request_codec_by_type_hint",
    "register_input_codec",
    "register_request_codec",
]


def deprecated(reason: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A decorator that logs ``DEPRECATED! <reason>`` (a warning) on every call, as MLServer's."""

    def wrap(func: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        def warned(*args: Any, **kwargs: Any) -> Any:
            logger.warning(f"DEPRECATED! {reason}")
            return func(*args, **kwargs)

        return warned

    return wrap


class InputCodec:
    """Converts one input (or output) tensor to and from a Python value."""

    ContentType: ClassVar[str] = ""
    TypeHint: ClassVar[Any] = type(None)

    @classmethod
    def can_encode(cls, payload: Any) -> bool:
        """Whether this codec can encode ``payload``."""
        return False

    @classmethod
    @deprecated("The encode() method is now deprecated. Use encode_output() instead.")
    def encode(cls, name: str, payload: Any) -> ResponseOutput:
        return cls.encode_output(name, payload)

    @classmethod
    def encode_output(cls, name: str, payload: Any, **kwargs: Any) -> ResponseOutput:
        raise NotImplementedError()

    @classmethod
    def decode_output(cls, response_output: ResponseOutput) -> Any:
        raise NotImplementedError()

    @classmethod
    def encode_input(cls, name: str, payload: Any, **kwargs: Any) -> RequestInput:
        raise NotImplementedError()

    @classmethod
    @deprecated("The decode() method is now deprecated. Use decode_input() instead.")
    def decode(cls, request_input: RequestInput) -> Any:
        return cls.decode_input(request_input)

    @classmethod
    def decode_input(cls, request_input: RequestInput) -> Any:
        raise NotImplementedError()


class RequestCodec:
    """Converts a whole request (or response) to and from a Python value."""

    ContentType: ClassVar[str] = ""
    TypeHint: ClassVar[Any] = type(None)

    @classmethod
    def can_encode(cls, payload: Any) -> bool:
        return False

    @classmethod
    @deprecated("The encode() method is now deprecated. Use encode_response() instead.")
    def encode(
        cls, model_name: str, payload: Any, model_version: str | None = None
    ) -> InferenceResponse:
        return cls.encode_response(model_name, payload, model_version)

    @classmethod
    def encode_response(
        cls, model_name: str, payload: Any, model_version: str | None = None, **kwargs: Any
    ) -> InferenceResponse:
        raise NotImplementedError()

    @classmethod
    def decode_response(cls, response: InferenceResponse) -> Any:
        raise NotImplementedError()

    @classmethod
    def encode_request(cls, payload: Any, **kwargs: Any) -> InferenceRequest:
        raise NotImplementedError()

    @classmethod
    @deprecated("The decode() method is now deprecated. Use decode_request() instead.")
    def decode(cls, request: InferenceRequest) -> Any:
        return cls.decode_request(request)

    @classmethod
    def decode_request(cls, request: InferenceRequest) -> Any:
        raise NotImplementedError()


class ElementsCodec(InputCodec):
    """An input codec for a list of values, each one element of a BYTES tensor ``[N, 1]``
    (``str``, ``base64``, ``datetime``): a subclass says how one element is written
    (:meth:`_encode`) and read (:meth:`_decode`); the request side is the response side with
    the same fields."""

    @classmethod
    def _encode(cls, elem: Any, use_bytes: bool) -> Any:
        raise NotImplementedError()

    @classmethod
    def _decode(cls, elem: Any) -> Any:
        raise NotImplementedError()

    @classmethod
    def encode_output(
        cls, name: str, payload: list[Any], use_bytes: bool = True, **kwargs: Any
    ) -> ResponseOutput:
        return ResponseOutput(
            name=name,
            datatype=Datatype.BYTES,
            shape=[len(payload), 1],
            data=TensorData([cls._encode(elem, use_bytes) for elem in payload]),
            parameters=Parameters(content_type=cls.ContentType),
        )

    @classmethod
    def decode_output(cls, response_output: ResponseOutput) -> list[Any]:
        return [cls._decode(elem) for elem in as_list(response_output.data.root)]

    @classmethod
    def encode_input(
        cls, name: str, payload: list[Any], use_bytes: bool = True, **kwargs: Any
    ) -> RequestInput:
        return as_input(cls.encode_output(name, payload, use_bytes))

    @classmethod
    def decode_input(cls, request_input: RequestInput) -> list[Any]:
        return [cls._decode(elem) for elem in as_list(request_input.data.root)]


def as_input(output: ResponseOutput) -> RequestInput:
    """The request input with an encoded output's fields (an input codec's ``encode_input``)."""
    return RequestInput(
        name=output.name,
        datatype=output.datatype,
        shape=output.shape,
        data=output.data,
        parameters=output.parameters,
    )


InputCodecLike: TypeAlias = type[InputCodec] | InputCodec
RequestCodecLike: TypeAlias = type[RequestCodec] | RequestCodec


def _first(matching: list[Any], what: str) -> Any:
    if not matching:
        logger.warning("No codec was found for %s.", what)
        return None
    if len(matching) > 1:
        logger.warning(
            "Multiple codecs (%d were found for %s. The first one found will be used (%s).",
            len(matching),
            what,
            matching[0].ContentType,
        )
    return matching[0]


class _Registry:
    """Codecs by content type, of one kind (input codecs, request codecs): a later registration
    for a content type replaces the earlier. As in MLServer, the module's ``find_*`` and
    ``register_*`` functions are the methods of a registry."""

    def __init__(self) -> None:
        self._codecs: dict[str, Any] = {}

    def register(self, codec: Any) -> Any:
        """Class decorator: register a codec under its ``ContentType``."""
        if codec.ContentType is not None:
            self._codecs[codec.ContentType] = codec
        return codec

    def find(
        self, content_type: str | None = None, payload: Any = None, type_hint: Any = None
    ) -> Any:
        """The codec for a content type, else one that can encode ``payload``, else the one
        whose ``TypeHint`` is ``type_hint``; ``None`` if none. The first truthy argument
        decides, as in MLServer: an empty payload finds nothing."""
        if content_type:
            return self._codecs.get(content_type)
        if payload:
            return self.by_payload(payload)
        if type_hint:
            return self.by_type_hint(type_hint)
        return None

    def by_payload(self, payload: Any) -> Any:
        matching = [c for c in self._codecs.values() if c.can_encode(payload)]
        return _first(matching, f"payload with type {type(payload)}")

    def by_type_hint(self, type_hint: Any) -> Any:
        matching = [c for c in self._codecs.values() if c.TypeHint == type_hint]
        return _first(matching, f"type hint {type_hint}")


_inputs = _Registry()
find_input_codec = _inputs.find
find_input_codec_by_payload = _inputs.by_payload
find_input_codec_by_type_hint = _inputs.by_type_hint
register_input_codec = _inputs.register

_requests = _Registry()
find_request_codec = _requests.find
find_request_codec_by_payload = _requests.by_payload
find_request_codec_by_type_hint = _requests.by_type_hint
register_request_codec = _requests.register
