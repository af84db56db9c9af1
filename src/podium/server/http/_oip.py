"""Open Inference Protocol REST wire format: request parsing and response rendering.

``generate`` and ``generate_stream`` accept two forms: the tensor form (an inference request with
``inputs``, as MLServer does) and Triton's generate form, where every top-level field other than
``id`` and ``parameters`` is an input and every output comes back as a top-level field
(``{"text_input": "hi"}`` → ``{"text_output": "..."}``).

``BYTES`` outputs in JSON are text, as Triton writes them: elements a model gave as ``bytes`` go
out as their UTF-8 text (msgspec alone would write base64), and bytes that are not UTF-8 are a
400 naming the output, since JSON cannot carry them (the binary extension can: the message says
to ask for the output as binary data). :func:`encode_response` is that JSON.

The binary tensor extension (Triton's ``binary_tensor_data``): a request with the
``Inference-Header-Content-Length`` header holds that many bytes of JSON, then the raw bytes of
every input that has ``parameters.binary_data_size``, in input order (:func:`parse_binary`).
Outputs come back raw when the request asks for it, per output (``binary_data``) or for all
(``binary_data_output``): the JSON then gives ``binary_data_size`` instead of ``data`` and the
raw bytes follow it, in output order (:func:`render_binary`). Raw encodings are those of
:func:`podium.codecs.decode_raw` and :func:`podium.codecs.encode_raw`.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec.structs import replace

from ... import codecs
from ...dataplane import REGION_PARAMETERS
from ...errors import InvalidInput, UnsupportedRepresentation, bounded
from ...types import (
    DATATYPES,
    InferenceRequest,
    InferenceResponse,
    RequestInput,
    ResponseOutput,
    Signature,
    TensorSpec,
)
from ._responses import encoder

_request_decoder = msgspec.json.Decoder(InferenceRequest)
_typed_decoder = msgspec.json.Decoder(codecs.TypedRequest)
_any_decoder = msgspec.json.Decoder()


class Form:
    """Which form the client used, so the response comes back in the same one.

    ``triton``: Triton's generate form. ``binary``: the body had binary tensors, so ``BYTES``
    outputs that hold ``bytes`` are rendered as text (see :func:`render_binary`).
    """

    __slots__ = ("binary", "triton")

    def __init__(self) -> None:
        self.triton = False
        self.binary = False


def decode_as(decoder: msgspec.json.Decoder[Any], body: bytes | memoryview, expected: str) -> Any:
    """``body`` decoded by ``decoder``; 400 naming ``expected`` and what is wrong."""
    if not body:
        raise InvalidInput(f"request body is empty; expected {expected}")
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise InvalidInput(f"invalid {expected}: {exc}") from exc
    except codecs.JSON_ERRORS as exc:
        raise InvalidInput(f"malformed JSON body: {codecs.json_problem(exc, body)}") from exc
    except RecursionError:
        raise InvalidInput("JSON body is nested too deeply") from None


def decode_json(body: bytes) -> Any:
    """Parse a JSON body; 400 with the reason for empty, malformed or absurdly nested input."""
    return decode_as(_any_decoder, body, "JSON")


def parse_object(body: bytes, what: str) -> dict[str, Any]:
    """The JSON object of a repository request's body (``what``: its name, for errors); an empty
    body is an empty object, as Triton takes it."""
    if not body.strip():
        return {}
    value = decode_json(body)
    if not isinstance(value, dict):
        raise InvalidInput(f"the body of a {what} must be a JSON object, got {_json_type(value)}")
    return value


def parameters_of(body: dict[str, Any], what: str) -> dict[str, Any]:
    """The ``parameters`` object of a repository request's body (empty when absent)."""
    parameters = body.get("parameters")
    if parameters is None:
        return {}
    if not isinstance(parameters, dict):
        raise InvalidInput(
            f"'parameters' of a {what} must be a JSON object, got {_json_type(parameters)}"
        )
    return parameters


def parse(
    body: bytes, action: str, form: Form, signature: Signature | None = None
) -> InferenceRequest:
    """The inference request in ``body``; a 400 names what is wrong and where. In Triton's
    generate form, a field the model declares (``signature``) takes its declared datatype."""
    if action.startswith("generate"):
        value = decode_json(body)
        if not isinstance(value, dict):
            raise InvalidInput(f"generate body must be a JSON object, got {_json_type(value)}")
        if "inputs" not in value:
            form.triton = True
            return _from_generate(value, signature)
        return _convert(value)
    return parse_request(body)


def parse_request(body: bytes) -> InferenceRequest:
    """An OIP inference request, decoded and checked in one pass (the ``infer`` hot path): each
    plain numeric input is checked while it is decoded (``codecs.TypedRequest``); a body that
    typed decode refuses is decoded again as it comes, and the general checks (or the decode)
    name what is wrong, so every 400 is as before."""
    try:
        return codecs.checked_request(_typed_decoder.decode(body))
    except (*codecs.JSON_ERRORS, RecursionError):
        pass
    request: InferenceRequest = decode_as(_request_decoder, body, "inference request")
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


def _generate_input(name: str, value: Any, declared: TensorSpec | None) -> RequestInput:
    """One top-level field of Triton's generate form as an input: a scalar as shape ``[1]``, a
    list (nested as Triton accepts it, ``[["hello"]]``) as the shape of its nesting. JSON has
    no datatypes: numbers take the ``declared`` one when the model declares a numeric type
    for the field (as Triton converts them to its config's), else INT64 / FP64; the codecs
    then check that every number fits it."""
    if isinstance(value, list):
        shape, leaves = _nesting(name, value)
    else:
        shape, leaves = [1], [value]
    if leaves:
        numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in leaves)
        parameters: dict[str, Any] | None = None
        if numbers and declared is not None and declared.datatype in _NUMERIC:
            datatype: str | None = declared.datatype
        elif numbers:
            datatype = "INT64" if all(isinstance(v, int) for v in leaves) else "FP64"
        elif all(isinstance(v, bool) for v in leaves):
            datatype = "BOOL"
        elif all(isinstance(v, str) for v in leaves):
            datatype, parameters = "BYTES", {"content_type": "str"}
        else:
            datatype = None
        if datatype is not None:
            return RequestInput(
                name=name, shape=shape, datatype=datatype, data=leaves, parameters=parameters
            )
    raise InvalidInput(
        f"generate field '{name}' must be a string, number, boolean or a list of one of those "
        f"(nested lists must be rectangular), got {_json_type(value)}"
    )


#: The deepest nesting a generate field may have (tensors of higher rank are unheard of).
_MAX_RANK = 32


def _nesting(name: str, value: list[Any]) -> tuple[list[int], list[Any]]:
    """The shape of a rectangular nested list (its lengths, outermost first) and its leaves in
    row-major order; :class:`InvalidInput` names a ragged one."""
    shape: list[int] = []
    probe: Any = value
    while isinstance(probe, list):
        if len(shape) == _MAX_RANK:
            raise InvalidInput(f"generate field '{name}' nests lists deeper than {_MAX_RANK}")
        shape.append(len(probe))
        if not probe:
            break
        probe = probe[0]
    try:
        return shape, codecs.flatten(value)  # the shape of its first elements, or ragged
    except codecs.RaggedError:
        raise InvalidInput(f"generate field '{name}' is a ragged nested list") from None


#: The datatypes a JSON number may take in the generate form.
_NUMERIC = frozenset(DATATYPES) - {"BOOL", "BYTES"}


def _from_generate(value: dict[str, Any], signature: Signature | None = None) -> InferenceRequest:
    parameters = value.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise InvalidInput("generate field 'parameters' must be an object")
    request_id = value.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise InvalidInput("generate field 'id' must be a string")
    declared = signature.by_name if signature is not None else {}
    inputs = [
        _generate_input(k, v, declared.get(k))
        for k, v in value.items()
        if k not in ("id", "parameters")
    ]
    return InferenceRequest(inputs=inputs, id=request_id, parameters=parameters)


def encode_response(response: InferenceResponse) -> bytes:
    """The JSON of ``response`` (the ``infer`` hot path): as msgspec writes it, but ``BYTES``
    elements that are ``bytes`` as UTF-8 text; :class:`UnsupportedRepresentation` (a 400)
    names an output whose bytes are not UTF-8."""
    outputs = response.outputs
    for index, out in enumerate(outputs):  # numeric outputs cost two comparisons each
        if out.data is None or (out.datatype == "BYTES" and _has_bytes(out.data)):
            texts = outputs[:index]
            for rest in outputs[index:]:
                if rest.data is None:
                    rest = _in_region(rest)
                elif rest.datatype == "BYTES" and _has_bytes(rest.data):
                    rest = replace(rest, data=_texts(response, rest, rest.data))
                texts.append(rest)
            return encoder.encode(replace(response, outputs=texts))
    return encoder.encode(response)


def _in_region(out: ResponseOutput) -> ResponseOutput:
    """An output written into shared memory (it has no data), as Triton answers it over REST:
    without the extension's parameters. Triton's C++ HTTP client (``perf_analyzer``'s) reads any
    output ``parameters`` as the binary extension's and fails when ``binary_data_size`` is not
    there; gRPC answers keep them (docs/protocols.md)."""
    params = out.parameters
    if not params:
        return out
    rest = {k: v for k, v in params.items() if k not in REGION_PARAMETERS}
    return ResponseOutput(
        name=out.name, shape=out.shape, datatype=out.datatype, parameters=rest or None
    )


_BLOB = (bytes, bytearray, memoryview)


def _has_bytes(data: Any) -> bool:
    """Whether a (nested) list holds an element msgspec would write as base64."""
    if not isinstance(data, list):
        return False  # numpy arrays go through codecs.json_default, which decodes bytes
    try:
        # The common case, a flat list of text, in one pass in C: join accepts only str.
        "".join(data)
    except TypeError:
        pass
    else:
        return False
    kinds = set(map(type, data))
    if any(issubclass(kind, _BLOB) for kind in kinds):
        return True
    return any(_has_bytes(item) for item in data if isinstance(item, list))


def _texts(response: InferenceResponse, out: ResponseOutput, data: Any) -> Any:
    """``data`` (a nested list) with every bytes element as its UTF-8 text."""
    try:
        return codecs.texts(data)
    except UnicodeDecodeError as exc:
        raise UnsupportedRepresentation(
            f"model '{response.model_name}' returned output '{out.name}' with bytes that are not "
            "valid UTF-8, which JSON cannot carry; ask for it as binary data"
        ) from exc


def render(response: InferenceResponse, form: Form, *, join: bool = False) -> bytes:
    """The JSON for ``response`` in the form the client used.

    ``join``: the response gathers the items of a streaming model; in Triton's form its text
    outputs come back as one string (the whole generated text), as Triton's ``generate`` does.
    """
    if form.binary:
        return render_binary(response, None)[0]
    if not form.triton:
        return encode_response(response)
    body: dict[str, Any] = {"model_name": response.model_name}
    if response.model_version:
        body["model_version"] = response.model_version
    if response.id:
        body["id"] = response.id
    for out in response.outputs:
        data = out.data
        if out.datatype == "BYTES" and _has_bytes(data):
            data = _texts(response, out, data)
        if join and out.datatype == "BYTES" and isinstance(data, list):
            if all(isinstance(d, str) for d in data):
                data = ["".join(data)]
        if isinstance(data, list) and len(data) == 1:
            data = data[0]
        body[out.name] = data
    return encoder.encode(body)


# --------------------------------------------------------------------------------------------
# The binary tensor extension

#: The request and response header that gives the length of the JSON part of the body.
BINARY_HEADER = b"inference-header-content-length"
_HEADER_NAME = "Inference-Header-Content-Length"


def parse_binary(body: bytes, header: bytes) -> InferenceRequest:
    """The inference request in a body with binary tensors; ``header`` is the JSON's length.

    Each input with ``parameters.binary_data_size`` gets its ``data`` decoded from the next that
    many bytes after the JSON (numpy arrays are read-only views of ``body``; ``BYTES`` is a
    ``list[bytes]``), and ``binary_data_size`` is removed from its parameters, so a model sees
    the same input it would have seen with JSON data. Every way the framing can be wrong is an
    :class:`InvalidInput` (a 400) saying which.
    """
    length = _header_length(header, len(body))
    view = memoryview(body)
    request: InferenceRequest = decode_as(_request_decoder, view[:length], "inference request")
    _attach_binary_inputs(request, view[length:], length)
    return request


def _header_length(header: bytes, size: int) -> int:
    text = header.strip()
    digits = text[1:] if text.startswith(b"-") else text
    if not digits.isdigit() or not digits.isascii():
        shown = bounded(repr(header.decode("latin-1")), 40)
        raise InvalidInput(f"{_HEADER_NAME} header must be a non-negative integer, got {shown}")
    length = int(text)
    if length < 0:
        raise InvalidInput(f"{_HEADER_NAME} header must not be negative, got {length}")
    if length > size:
        raise InvalidInput(
            f"{_HEADER_NAME} header is {length}, larger than the request body of {_bytes(size)}"
        )
    return length


def _bytes(n: int) -> str:
    return f"{n} byte" if n == 1 else f"{n} bytes"


def _attach_binary_inputs(request: InferenceRequest, rest: memoryview, header: int) -> None:
    binary: list[tuple[RequestInput, int]] = []
    for inp in request.inputs:
        params = inp.parameters
        if not params or "binary_data_size" not in params:
            continue
        size = params["binary_data_size"]
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise InvalidInput(
                f"input '{inp.name}' has parameters.binary_data_size {size!r}; "
                "it must be a non-negative integer"
            )
        if inp.data is not None:
            raise InvalidInput(
                f"input '{inp.name}' has both data and parameters.binary_data_size; "
                "send its tensor either in the JSON or as binary data, not both"
            )
        binary.append((inp, size))
    total = sum(size for _, size in binary)
    available = len(rest)
    if total != available:
        sizes = ", ".join(f"'{inp.name}': {size}" for inp, size in binary) or "none"
        if total > available:
            problem = f"{_bytes(total - available)} missing"
        else:
            problem = f"{_bytes(available - total)} too many"
        raise InvalidInput(
            f"the request body has {_bytes(available)} after its {header}-byte JSON header, "
            f"but the inputs' binary_data_size add up to {total} ({sizes}): {problem}"
        )
    offset = 0
    for inp, size in binary:
        inp.data = codecs.decode_raw(
            inp.name, inp.datatype, inp.shape, rest[offset : offset + size]
        )
        offset += size
        params = dict(inp.parameters or {})
        del params["binary_data_size"]
        inp.parameters = params or None


def binary_outputs(request: InferenceRequest | None) -> tuple[bool, dict[str, bool]] | None:
    """Which outputs ``request`` asks to get back as binary data; ``None`` when none.

    ``(default, by_name)``: an output named in ``by_name`` (its ``parameters.binary_data``)
    follows that, every other one ``default`` (the request's ``binary_data_output``).
    """
    if request is None or (request.parameters is None and request.outputs is None):
        return None  # the plain JSON request: nothing more to look at
    params = request.parameters
    default = params is not None and params.get("binary_data_output") is True
    by_name: dict[str, bool] = {}
    for out in request.outputs or ():
        if out.parameters and "binary_data" in out.parameters:
            by_name[out.name] = out.parameters["binary_data"] is True
    if not default and not any(by_name.values()):
        return None
    return default, by_name


def render_binary(
    response: InferenceResponse, binary: tuple[bool, dict[str, bool]] | None
) -> tuple[bytes, int | None]:
    """The body for ``response`` to a request that used the binary extension.

    Returns ``(body, json_length)``: the JSON followed by the raw bytes of each binary output in
    output order, and the JSON's length for the ``Inference-Header-Content-Length`` header, or
    ``None`` when no output is binary and the body is plain JSON. JSON outputs get ``BYTES``
    elements that are ``bytes`` as text (UTF-8), and never a ``binary_data_size`` parameter.
    """
    default, by_name = binary if binary is not None else (False, {})
    outputs: list[ResponseOutput] = []
    blobs: list[bytes] = []
    for out in response.outputs:
        params = out.parameters
        if out.data is not None and params and "binary_data_size" in params:
            params = {k: v for k, v in params.items() if k != "binary_data_size"} or None
            out = replace(out, parameters=params)
        if out.data is not None and by_name.get(out.name, default):
            try:
                blob = codecs.encode_raw(out)
            except UnsupportedRepresentation as exc:
                raise UnsupportedRepresentation(
                    f"model '{response.model_name}' returned an output that cannot be sent as "
                    f"binary data: {exc.message}"
                ) from exc
            blobs.append(blob)
            params = {**(params or {}), "binary_data_size": len(blob)}
            out = ResponseOutput(
                name=out.name, shape=out.shape, datatype=out.datatype, parameters=params
            )
        outputs.append(out)
    # The JSON part as the plain response's: text for bytes, outputs in shared memory bare.
    head = encode_response(replace(response, outputs=outputs))
    if not blobs:
        return head, None
    return b"".join([head, *blobs]), len(head)
