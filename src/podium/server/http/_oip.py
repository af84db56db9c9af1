"""Open Inference Protocol REST wire format: request parsing and response rendering.

``generate`` and ``generate_stream`` accept two forms: the tensor form (an inference request with
``inputs``, as MLServer does) and Triton's generate form, where every top-level field other than
``id`` and ``parameters`` is an input and every output comes back as a top-level field
(``{"text_input": "hi"}`` → ``{"text_output": "..."}``).
"""

from __future__ import annotations

from typing import Any

import msgspec

from ...errors import InvalidInput
from ...types import InferenceRequest, InferenceResponse, RequestInput
from ._responses import encoder

ACTIONS = frozenset({"infer", "infer_stream", "generate", "generate_stream"})

_request_decoder = msgspec.json.Decoder(InferenceRequest)
_any_decoder = msgspec.json.Decoder()


class Form:
    """Which generate form the client used, so the response comes back in the same one."""

    __slots__ = ("triton",)

    def __init__(self) -> None:
        self.triton = False


def _decode(decoder: msgspec.json.Decoder[Any], body: bytes, expected: str) -> Any:
    if not body:
        raise InvalidInput(f"request body is empty; expected {expected}")
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise InvalidInput(f"invalid {expected}: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise InvalidInput(f"malformed JSON body: {exc}") from exc
    except RecursionError:
        raise InvalidInput("JSON body is nested too deeply") from None


def decode_json(body: bytes) -> Any:
    """Parse a JSON body; 400 with the reason for empty, malformed or absurdly nested input."""
    return _decode(_any_decoder, body, "JSON")


def parse(body: bytes, action: str, form: Form) -> InferenceRequest:
    """The inference request in ``body``; a 400 names what is wrong and where."""
    if action.startswith("generate"):
        value = decode_json(body)
        if not isinstance(value, dict):
            raise InvalidInput(f"generate body must be a JSON object, got {_json_type(value)}")
        if "inputs" not in value:
            form.triton = True
            return _from_generate(value)
        return _convert(value)
    return parse_request(body)


def parse_request(body: bytes) -> InferenceRequest:
    """An OIP inference request, decoded and checked in one pass (the ``infer`` hot path)."""
    request: InferenceRequest = _decode(_request_decoder, body, "inference request")
    return request


def _convert(value: dict[str, Any]) -> InferenceRequest:
    try:
        return msgspec.convert(value, InferenceRequest)
    except msgspec.ValidationError as exc:
        raise InvalidInput(f"invalid inference request: {exc}") from exc


def _json_type(value: Any) -> str:
    return {
        list: "an array",
        str: "a string",
        int: "a number",
        float: "a number",
        bool: "a boolean",
        type(None): "null",
    }.get(type(value), type(value).__name__)


def _generate_input(name: str, value: Any) -> RequestInput:
    if isinstance(value, str):
        return RequestInput(
            name=name, shape=[1], datatype="BYTES", data=[value], parameters={"content_type": "str"}
        )
    if isinstance(value, bool):
        return RequestInput(name=name, shape=[1], datatype="BOOL", data=[value])
    if isinstance(value, int):
        return RequestInput(name=name, shape=[1], datatype="INT64", data=[value])
    if isinstance(value, float):
        return RequestInput(name=name, shape=[1], datatype="FP64", data=[value])
    if isinstance(value, list) and value:
        if all(isinstance(v, str) for v in value):
            return RequestInput(
                name=name,
                shape=[len(value)],
                datatype="BYTES",
                data=value,
                parameters={"content_type": "str"},
            )
        if all(isinstance(v, bool) for v in value):
            return RequestInput(name=name, shape=[len(value)], datatype="BOOL", data=value)
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return RequestInput(name=name, shape=[len(value)], datatype="INT64", data=value)
        if all(isinstance(v, int | float) and not isinstance(v, bool) for v in value):
            return RequestInput(name=name, shape=[len(value)], datatype="FP64", data=value)
    raise InvalidInput(
        f"generate field '{name}' must be a string, number, boolean or a flat list of one of "
        f"those, got {_json_type(value)}"
    )


def _from_generate(value: dict[str, Any]) -> InferenceRequest:
    parameters = value.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise InvalidInput("generate field 'parameters' must be an object")
    request_id = value.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise InvalidInput("generate field 'id' must be a string")
    inputs = [_generate_input(k, v) for k, v in value.items() if k not in ("id", "parameters")]
    return InferenceRequest(inputs=inputs, id=request_id, parameters=parameters)


def render(response: InferenceResponse, form: Form, *, join: bool = False) -> bytes:
    """The JSON for ``response`` in the form the client used.

    ``join``: the response gathers the items of a streaming model; in Triton's form its text
    outputs come back as one string (the whole generated text), as Triton's ``generate`` does.
    """
    if not form.triton:
        return encoder.encode(response)
    body: dict[str, Any] = {"model_name": response.model_name}
    if response.model_version:
        body["model_version"] = response.model_version
    if response.id:
        body["id"] = response.id
    for out in response.outputs:
        data = out.data
        if join and out.datatype == "BYTES" and isinstance(data, list):
            if all(isinstance(d, str) for d in data):
                data = ["".join(data)]
        if isinstance(data, list) and len(data) == 1:
            data = data[0]
        body[out.name] = data
    return encoder.encode(body)
