"""OIP protobuf messages to Podium's neutral types and back (``ModelInferRequest`` and
``ModelInferResponse``; the other OIP messages are simple enough to build in the servicer).

Input tensors arrive either in the typed ``contents`` field that matches their datatype, or all
of them in ``raw_input_contents`` (little-endian bytes, what ``tritonclient.grpc`` always sends),
decoded by :func:`podium.codecs.decode_raw` into numpy arrays (``list[bytes]`` for BYTES). FP16
and BF16 have no typed field, so they travel raw only. The response is raw when the request was
(or always, with ``--grpc-output-contents raw``), or when an output's datatype has no typed field;
typed otherwise.

Inputs in system shared memory (Triton's extension: parameter ``shared_memory_region``) have no
contents here and no entry in ``raw_input_contents``; the data plane reads them. Outputs written
into shared memory have no data: typed, no contents; raw, an empty entry, so that the entries stay
in the order of the outputs (as Triton).

Parameters of every kind (``bool``, ``int64``, ``string``, ``double``, ``uint64``) become plain
Python values and back: ``bool`` → bool, ``int`` → int64 (uint64 above the int64 range),
``float`` → double, ``str`` → string. ``None`` is left out, and any other value (a list, a
mapping) travels as its JSON text in a string parameter, since no parameter kind can hold it.

Repeated fields are read as lists (``field[:]``, one C call) and never iterated themselves:
protobuf's upb containers have no ``__iter__``, so Python iterates them by index until one raises
an ``IndexError``, whose message it formats each time (bench/RESULTS.md §46).
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np

from ... import codecs
from ...dataplane import REGION
from ...errors import InvalidInput, InvalidTensor, UnsupportedRepresentation
from ...types import InferenceRequest, InferenceResponse, RequestInput, RequestOutput
from ._pool import message_class

__all__ = [
    "ModelInferRequest",
    "ModelInferResponse",
    "fill_parameters",
    "parameters_of",
    "to_message",
    "to_request",
    "uses_shared_memory",
]

ModelInferRequest: Any = message_class("inference.ModelInferRequest")
ModelInferResponse: Any = message_class("inference.ModelInferResponse")

#: The typed ``InferTensorContents`` field of each datatype (FP16 and BF16 have none).
TYPED_FIELD = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}

_INT64_MIN, _INT64_MAX, _UINT64_MAX = -(2**63), 2**63 - 1, 2**64 - 1
_json = msgspec.json.Encoder(enc_hook=codecs.json_default)


# -- parameters ----------------------------------------------------------------------------------


def parameters_of(parameters: Any) -> dict[str, Any] | None:
    """A protobuf ``map<string, InferParameter>`` as a dict of plain values; None when empty."""
    if not parameters:
        return None
    out: dict[str, Any] = {}
    for key, value in parameters.items():
        kind = value.WhichOneof("parameter_choice")
        out[key] = getattr(value, kind) if kind is not None else None
    return out


def fill_parameters(target: Any, parameters: dict[str, Any]) -> None:
    """Write ``parameters`` into a protobuf ``map<string, InferParameter>`` (see the module doc)."""
    for key, value in parameters.items():
        if value is None:
            continue
        if isinstance(value, np.generic):
            value = value.item()
        param = target[str(key)]
        if isinstance(value, bool):
            param.bool_param = value
        elif isinstance(value, int):
            if _INT64_MIN <= value <= _INT64_MAX:
                param.int64_param = value
            elif 0 <= value <= _UINT64_MAX:
                param.uint64_param = value
            else:
                param.string_param = str(value)
        elif isinstance(value, float):
            param.double_param = value
        elif isinstance(value, str):
            param.string_param = value
        else:
            try:
                param.string_param = _json.encode(value).decode()
            except (TypeError, UnsupportedRepresentation) as exc:
                raise UnsupportedRepresentation(
                    f"parameter '{key}' is a {type(value).__name__}, which no gRPC parameter "
                    f"can carry: {exc}"
                ) from exc


# -- requests ------------------------------------------------------------------------------------


def to_request(message: Any) -> InferenceRequest:
    """A ``ModelInferRequest`` as an :class:`InferenceRequest` with decodable input data.

    Raises :class:`InvalidTensor` naming the input when its data is missing, in the wrong typed
    field, in a datatype that has no typed field (FP16, BF16), or raw bytes that do not decode;
    :class:`InvalidInput` when raw contents do not pair up with the inputs.
    """
    raw = message.raw_input_contents
    inputs = message.inputs[:]  # a list: see the module's docstring
    in_memory = 0  # inputs in shared memory have no raw entry (as Triton pairs them)
    if raw:  # checked first, as Triton does: its examples send both and match on these words
        for tensor in inputs:
            if tensor.HasField("contents"):
                raise InvalidTensor(
                    "contents field must not be specified when using raw_input_contents for "
                    f"'{tensor.name}' for model '{message.model_name}': a request uses one or "
                    "the other for all its inputs"
                )
    if raw and len(raw) != len(inputs):
        in_memory = sum(1 for tensor in inputs if REGION in tensor.parameters)
        if len(raw) + in_memory != len(inputs):
            raise InvalidInput(
                f"the request has {len(inputs)} inputs ({in_memory} in shared memory) but "
                f"{len(raw)} raw_input_contents; with raw contents every input not in shared "
                "memory has exactly one entry, in the order of the inputs"
            )
    decoded = []
    index = 0
    for tensor in inputs:
        name, datatype, shape = tensor.name, tensor.datatype, tensor.shape[:]
        if in_memory and REGION in tensor.parameters:
            data: Any = None  # the data plane reads it from its region
        elif raw:
            data = codecs.decode_raw(name, datatype, shape, raw[index])
            index += 1
        elif tensor.HasField("contents") or REGION not in tensor.parameters:
            data = _typed_input(tensor, name, datatype)
        else:
            data = None  # in shared memory, as every input of a request without raw contents
        decoded.append(
            RequestInput(
                name=name,
                shape=shape,
                datatype=datatype,
                parameters=parameters_of(tensor.parameters),
                data=data,
            )
        )
    outputs = [
        RequestOutput(name=out.name, parameters=parameters_of(out.parameters))
        for out in message.outputs[:]
    ]
    return InferenceRequest(
        inputs=decoded,
        id=message.id or None,
        parameters=parameters_of(message.parameters),
        outputs=outputs or None,
    )


def uses_shared_memory(message: Any) -> bool:
    """Whether an input or a requested output of a ``ModelInferRequest`` names a shared memory
    region (Triton's ``shared_memory_region`` parameter)."""
    for tensors in (message.inputs[:], message.outputs[:]):  # (no generator per call)
        for tensor in tensors:
            if REGION in tensor.parameters:
                return True
    return False


def _typed_input(tensor: Any, name: str, datatype: str) -> Any:
    field = TYPED_FIELD.get(datatype)
    if field is None:
        if datatype in ("FP16", "BF16"):
            raise InvalidTensor(
                f"input '{name}' has datatype {datatype}, which has no typed contents field; "
                "send it in raw_input_contents"
            )
        return None  # codecs names the unknown datatype
    if not tensor.HasField("contents"):
        return None  # codecs: "has no data"
    contents = tensor.contents
    for descriptor, _ in contents.ListFields():
        if descriptor.name != field:
            raise InvalidTensor(
                f"input '{name}' of datatype {datatype} carries its elements in "
                f"{descriptor.name}; that datatype's field is {field}"
            )
    return getattr(contents, field)[:]


# -- responses -----------------------------------------------------------------------------------


def to_message(response: InferenceResponse, raw: bool, into: Any = None) -> Any:
    """An :class:`InferenceResponse` as a ``ModelInferResponse``; raw contents if ``raw``.

    ``into`` is an empty ``ModelInferResponse`` to fill (one nested in another message, which
    then needs no copy); a new one otherwise. Raises :class:`UnsupportedRepresentation` naming
    the output whose data its datatype cannot hold.
    """
    message = ModelInferResponse() if into is None else into
    message.model_name = response.model_name
    message.model_version = response.model_version or ""
    message.id = response.id or ""
    if response.parameters:
        fill_parameters(message.parameters, response.parameters)
    outputs = response.outputs
    if not raw:
        raw = any(out.datatype not in TYPED_FIELD for out in outputs)
    for out in outputs:
        tensor = message.outputs.add(name=out.name, datatype=out.datatype, shape=out.shape)
        if out.parameters:
            fill_parameters(tensor.parameters, out.parameters)
        if out.data is None:  # written into shared memory: an empty entry keeps the order
            if raw:
                message.raw_output_contents.append(b"")
        elif raw:
            message.raw_output_contents.append(codecs.encode_raw(out))
        else:
            _fill_typed(tensor.contents, out.name, out.datatype, out.data)
    return message


def _fill_typed(contents: Any, name: str, datatype: str, data: Any) -> None:
    values = codecs.output_elements(name, data)
    if datatype == "BYTES":
        values = [v if isinstance(v, bytes) else str(v).encode() for v in values]
    try:
        getattr(contents, TYPED_FIELD[datatype]).extend(values)
    except (TypeError, ValueError, OverflowError) as exc:
        raise UnsupportedRepresentation(
            f"output '{name}' of datatype {datatype} has data its typed contents cannot hold: {exc}"
        ) from exc
