"""``decode_args``: a ``predict`` written with typed Python arguments, decoded by codecs.

The parameters' type hints pick the codecs (``np.ndarray`` → ``NumpyCodec``, ``list[str]`` →
``StringCodec``, ...); each request input goes to the parameter of its name. The return hint
(one type, or a tuple of them) encodes the outputs, named ``output-0``, ``output-1``, ...
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Callable
from typing import Any

from ..types import InferenceRequest, InferenceResponse, ResponseOutput
from .base import InputCodec, RequestCodec, find_input_codec, find_request_codec
from .errors import CodecNotFound, InputsNotFound, OutputNotFound

__all__ = ["PredictFunc", "SignatureCodec", "decode_args"]

#: What ``decode_args`` wraps into: a runtime's ``predict(payload) -> InferenceResponse``.
PredictFunc = Callable[[InferenceRequest], typing.Coroutine[Any, Any, InferenceResponse]]


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, tuple):
        return list(value)
    if typing.get_origin(value) is tuple:
        return list(typing.get_args(value))
    return [value]


def _is(codec: Any, kind: type) -> bool:
    return (isinstance(codec, type) and issubclass(codec, kind)) or isinstance(codec, kind)


def _without_optional(hint: Any) -> Any:
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        if len(args) == 2 and type(None) in args:
            return next(a for a in args if a is not type(None))
    return hint


class SignatureCodec(RequestCodec):
    """Maps a ``predict`` signature's type hints onto codecs."""

    def __init__(self, predict: Callable[..., Any]) -> None:
        hints = {
            name: _without_optional(hint) for name, hint in typing.get_type_hints(predict).items()
        }
        self._output_hints = _as_list(hints.pop("return", None))
        self._input_codecs = {
            name: self._find_codec(name, hint, is_input=True) for name, hint in hints.items()
        }
        self._output_codecs = [
            self._find_codec(None, hint, is_input=False) for hint in self._output_hints
        ]

    @staticmethod
    def _find_codec(name: str | None, hint: Any, is_input: bool) -> Any:
        codec = find_input_codec(type_hint=hint)
        if codec is None:
            codec = find_request_codec(type_hint=hint)
        if codec is None:
            raise CodecNotFound(name=name, payload_type=str(hint), is_input=is_input)
        return codec

    def decode_request(self, request: InferenceRequest) -> dict[str, Any]:  # type: ignore[override]
        inputs: dict[str, Any] = {}
        extra = []
        for request_input in request.inputs:
            codec = self._input_codecs.get(request_input.name)
            if codec is None:
                extra.append(request_input)  # maybe for a request codec (a dataframe...)
                continue
            if not _is(codec, InputCodec):
                raise CodecNotFound(name=request_input.name, is_input=True)
            inputs[request_input.name] = codec.decode_input(request_input)
        if extra:
            found = next(
                ((n, c) for n, c in self._input_codecs.items() if _is(c, RequestCodec)), None
            )
            if found is None:
                raise InputsNotFound(extra, self._input_codecs)
            name, codec = found
            inputs[name] = codec.decode_request(InferenceRequest(inputs=extra))
        return inputs

    def encode_response(  # type: ignore[override]
        self, model_name: str, payload: Any, model_version: str | None = None
    ) -> InferenceResponse:
        outputs: list[ResponseOutput] = []
        for index, value in enumerate(_as_list(payload)):
            outputs += self._encode_outputs(index, value)
        return InferenceResponse(
            model_name=model_name, model_version=model_version, outputs=outputs
        )

    def _encode_outputs(self, index: int, value: Any) -> list[ResponseOutput]:
        if index >= len(self._output_codecs):
            raise OutputNotFound(index, type(value), self._output_hints)
        codec = self._output_codecs[index]
        if not codec.can_encode(value):
            raise OutputNotFound(index, type(value), self._output_hints)
        if _is(codec, InputCodec):
            return [codec.encode_output(name=f"output-{index}", payload=value)]
        if _is(codec, RequestCodec):
            return list(codec.encode_response(model_name="", payload=value).outputs)
        return []


def decode_args(predict: Callable[..., Any]) -> Callable[[Any, InferenceRequest], Any]:
    """Decorate ``async def predict(self, a: np.ndarray, b: list[str]) -> np.ndarray`` into an
    ``MLModel.predict(payload: InferenceRequest) -> InferenceResponse``."""
    codec = SignatureCodec(predict)

    @functools.wraps(predict)
    async def wrapper(self: Any, payload: InferenceRequest) -> InferenceResponse:
        outputs = await predict(self, **codec.decode_request(payload))
        return codec.encode_response(self.name, outputs, self.version)

    return wrapper
