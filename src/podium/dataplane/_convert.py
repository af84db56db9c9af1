"""The data plane's conversions: a protocol's payload into what a model takes, and a model's
value into the protocol's neutral form (``docs/protocols.md`` has the table, cell by cell)."""

from __future__ import annotations

from typing import Any

import msgspec

from .. import codecs
from ..errors import InvalidInput, UnsupportedRepresentation
from ..runtime import ModelVersion
from ..types import (
    Call,
    InferenceRequest,
    InferenceResponse,
    InputKind,
    Reply,
    SequenceRef,
    WireInput,
    WireProtocol,
    request_id,
)

__all__ = ["gather", "inputs_of", "oip_response", "take_headers"]

# The input kinds :func:`inputs_of` tells apart on every call, read off the enum once: on Python
# 3.11 each read of a member off its class (``InputKind.RAW``) goes through the enum type's
# ``__getattr__`` hook, which costs as much as a function call (3.12 dropped that hook).
_DEFAULT, _OIP_REQUEST, _RAW, _SCHEMA, _WIRE = (
    InputKind.DEFAULT,
    InputKind.OIP_REQUEST,
    InputKind.RAW,
    InputKind.SCHEMA,
    InputKind.WIRE,
)


def inputs_of(mv: ModelVersion, call: Call) -> tuple[Any, InferenceRequest | None]:
    """What the model's first parameter asks for (its capabilities' ``input_kind``) made of the
    call's payload, and the OIP request the call carried (None for other protocols).

    An OIP request is checked before any model sees it, whatever it asks for: against the
    protocol (known datatype, shape and element count, element types and ranges: decoding
    checks that itself, and a request a model takes as it is gets the same checks without the
    decoding, ``codecs.check_request``), then against the inputs the model declares
    (``model_metadata``: names, datatypes, shapes, batch size)."""
    inst = mv.instance
    caps = inst.capabilities
    if not caps.needs_inputs:
        return None, None
    raw = call.payload
    kind = caps.input_kind
    protocol = call.protocol
    if protocol.oip:
        request: InferenceRequest = raw
    elif kind is _OIP_REQUEST:  # JSON text or JSON-like data
        try:
            if isinstance(raw, bytes | str):
                request = msgspec.json.decode(raw, type=InferenceRequest)
            else:
                request = msgspec.convert(raw, InferenceRequest)
        except msgspec.ValidationError as exc:
            raise InvalidInput(f"model '{mv.name}' takes an inference request: {exc}") from exc
        except codecs.JSON_ERRORS as exc:
            problem = codecs.json_problem(exc, raw)
            raise InvalidInput(f"model '{mv.name}' takes an inference request: {problem}") from exc
    elif kind is _SCHEMA:
        return inst.validate(raw), None
    elif kind is _WIRE:
        return WireInput(protocol, raw, request_id()), None
    else:
        return raw, None
    decode = kind is _DEFAULT or kind is _SCHEMA
    if decode:
        decoded = codecs.decode_request(request)
    else:
        codecs.check_request(request, text_length_shapes=protocol.oip and caps.text_length_shapes)
    signature = mv.config.signature
    if signature.inputs and caps.checks_declared_inputs:
        codecs.check_declared(request, signature, mv.label)
    oip = request if protocol.oip else None
    if kind is _SCHEMA:
        return inst.validate(codecs.inputs_as_json(decoded)), oip
    if decode:
        return decoded, oip
    if kind is _OIP_REQUEST:
        return request, oip
    if kind is _RAW:
        return codecs.request_builtins(request), oip
    return WireInput(protocol, codecs.request_builtins(request), request_id()), oip


def oip_response(
    mv: ModelVersion,
    result: Any,
    request: InferenceRequest | None,
    sequence: SequenceRef | None = None,
) -> InferenceResponse:
    """A model's value as an OIP response: outputs encoded (those ``request`` asks for), the
    model's name and version, the request's id, and a sequence's id (and end) as parameters."""
    requested = request.outputs if request is not None else None
    config = mv.config  # (its name and version: ``mv.name`` and ``mv.version`` are calls)
    if type(result) is InferenceResponse and not requested and type(result.outputs) is list:
        # The model's own response, and the request names no outputs: its outputs are the
        # answer as they are (encoding would copy the list), completed with the name, version
        # and the request's id. (Nothing rewrites them: a shared memory placement writes only
        # outputs a request names, whose list encoding has made.)
        response = result
        response.model_name = config.name
        response.model_version = config.version
        if request is not None and request.id is not None:
            response.id = request.id
    else:
        try:
            outputs = codecs.encode_outputs(result, requested)
        except UnsupportedRepresentation as exc:
            raise UnsupportedRepresentation(
                f"model '{config.name}' returned a value the Open Inference Protocol cannot "
                f"carry: {exc.message}"
            ) from exc
        request_id = request.id if request is not None else None
        if isinstance(result, InferenceResponse):  # (a subclass's, or outputs asked for)
            result.outputs = outputs
            result.model_name = config.name
            result.model_version = config.version
            if request_id is not None:
                result.id = request_id
            response = result
        else:
            response = InferenceResponse(
                outputs=outputs, model_name=config.name, model_version=config.version, id=request_id
            )
    if sequence is not None and sequence.id is not None:
        # Every response of a sequence names it (Triton's sequence parameters).
        response.parameters = {**(response.parameters or {}), "sequence_id": sequence.id}
        if sequence.ended:
            response.parameters["sequence_end"] = True
    return response


def gather(
    mv: ModelVersion,
    protocol: WireProtocol,
    items: list[Any],
    request: InferenceRequest | None,
    sequence: SequenceRef | None,
) -> Any:
    """A streaming model's items as one value, for a call that is not streamed: OIP outputs
    concatenated; text or bytes joined; a :class:`Reply` when an item is one (the first reply's
    status and headers stand for the whole); else the list."""
    if protocol.oip:
        parts = [oip_response(mv, item, request).outputs for item in items]
        return oip_response(mv, codecs.concat_outputs(parts), request, sequence)
    first = next((i for i in items if isinstance(i, Reply)), None)
    if first is not None:
        bodies = [i.body if isinstance(i, Reply) else i for i in items]
        return Reply(codecs.joined(bodies), first.status, dict(first.headers), first.content_type)
    return codecs.joined(items)


def take_headers(response: InferenceResponse) -> dict[str, str] | None:
    """Take the ``headers`` parameter of a model's response (MLServer's convention for response
    headers) out of its body: the headers for the front end to send as headers, or None."""
    parameters = response.parameters
    if not parameters:
        return None
    headers = parameters.get("headers")
    if not isinstance(headers, dict):
        return None
    del parameters["headers"]
    if not parameters:
        response.parameters = None
    return {str(key): str(value) for key, value in headers.items() if value is not None}
