"""The inference listener's description: what :data:`INFERENCE_ROUTES` does not say about its
operations (summaries, bodies, every status each route answers), for ``server/_openapi.py``.

The OIP bodies are described by the msgspec types that parse and encode them
(:class:`~podium.types.InferenceRequest` and the rest); the error body is the one every route of
this listener sends (``{"error": "...", "details": [...]}``, ``_responses.error_body``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ... import __version__
from ...dataplane import ModelConfiguration, RegionStatus, StatisticsResponse
from ...types import (
    DATATYPES,
    InferenceRequest,
    InferenceResponse,
    ModelMetadata,
    ServerMetadata,
)
from .._openapi import (
    BINARY,
    DOCUMENT_SCHEMA,
    TORCHSERVE_ERROR,
    Operation,
    body,
    describe,
    error_responses,
    param,
    ref,
    response,
    schemas,
)
from .._repository import STATE_NAMES
from ._memory import RegionRegister
from ._oip import _HEADER_NAME as _BINARY_HEADER
from ._routing import RouteTable
from ._truss import ENDPOINT_PATHS

__all__ = ["description"]

# -- the bodies that no msgspec type parses --------------------------------------------------

_INDEX = {
    "type": "array",
    "description": "Every model version, by name then version (Triton's repository index).",
    "items": {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "version": {"type": "string", "description": '"1" for an unversioned model.'},
            "state": {"type": "string", "enum": sorted(set(STATE_NAMES.values()))},
            "reason": {"type": "string", "description": "Why it is not ready (when it is not)."},
        },
        "required": ["name", "version", "state"],
    },
}
_INDEX_BODY = body(
    'Optional: {"ready": true} lists only the versions that are ready.',
    {"application/json": {"type": "object", "properties": {"ready": {"type": "boolean"}}}},
)


_DONE = {"description": "Done (an empty body, as Triton answers)."}


def _control_body(parameters: Mapping[str, Any]) -> dict[str, Any]:
    schema = {"type": "object", "properties": parameters}
    return body(
        "Optional: Triton's parameters.",
        {"application/json": {"type": "object", "properties": {"parameters": schema}}},
    )


_ERROR = {
    "type": "object",
    "description": "Every error of this listener: what went wrong, naming the thing and the rule.",
    "properties": {
        "error": {"type": "string"},
        "details": {
            "type": "array",
            "items": {"type": "object"},
            "description": "Where the inputs failed the model's own schema.",
        },
    },
    "required": ["error"],
}
_LIVE = {"type": "object", "properties": {"live": {"type": "boolean"}}, "required": ["live"]}
_READY = {"type": "object", "properties": {"ready": {"type": "boolean"}}, "required": ["ready"]}
_MODEL_READY = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "version": {"type": "string"},
        "ready": {"type": "boolean"},
    },
    "required": ["name", "ready"],
}
_PING = {
    "type": "object",
    "properties": {"status": {"type": "string", "enum": ["Healthy", "Partial Healthy"]}},
    "required": ["status"],
}
#: Triton's generate form: each top-level field other than ``id`` and ``parameters`` is an input.
_GENERATE_FORM = {
    "type": "object",
    "description": (
        "Triton's generate form: every field other than id and parameters is an input "
        "(a string, number, boolean or a flat list of one of those)."
    ),
    "properties": {
        "id": {"type": "string"},
        "parameters": {"type": "object"},
    },
    "not": {"required": ["inputs"]},
    "additionalProperties": {
        "anyOf": [
            {"type": ["string", "number", "boolean"]},
            {"type": "array", "minItems": 1, "items": {"type": ["string", "number", "boolean"]}},
        ]
    },
}
_GENERATE_ANSWER = {
    "type": "object",
    "description": (
        "Triton's generate form (the request was in that form): model_name, model_version, "
        "id, and each output as a top-level field."
    ),
    "properties": {"model_name": {"type": "string"}, "model_version": {"type": "string"}},
    "required": ["model_name"],
}


def _components() -> dict[str, Any]:
    found = schemas(
        (
            InferenceRequest,
            InferenceResponse,
            ServerMetadata,
            ModelMetadata,
            ModelConfiguration,
            StatisticsResponse,
            RegionStatus,
            RegionRegister,
        )
    )
    # The codecs accept exactly the OIP datatypes (any other is a 400): say which they are.
    for name in ("RequestInput", "ResponseOutput"):
        found[name]["properties"]["datatype"] = {"type": "string", "enum": sorted(DATATYPES)}
    found.update(
        Error=_ERROR,
        TorchServeError=TORCHSERVE_ERROR,  # under /predictions
        ServerLive=_LIVE,
        ServerReady=_READY,
        ModelReady=_MODEL_READY,
        Ping=_PING,
        GenerateRequest=_GENERATE_FORM,
        GenerateResponse=_GENERATE_ANSWER,
        RepositoryIndex=_INDEX,
        OpenApiDocument=DOCUMENT_SCHEMA,
    )
    return {"schemas": found, "responses": error_responses(_WHY)}


# -- statuses --------------------------------------------------------------------------------

_WHY = {
    "400": "The request is malformed: its body, a tensor, or the binary framing (named).",
    "401": "Token authorization is on (--auth) and the request has no valid inference key.",
    "403": (
        "Refused by the server's settings: shared memory is off (--shared-memory system), or "
        "loading and unloading models are not open here (--model-control inference)."
    ),
    "404": "No such model, version or shared memory region.",
    "409": "A shared memory region of that name is registered already.",
    "410": "The request names a sequence that is over (ended, expired, or its state was lost).",
    "413": "The body is larger than --max-request-size.",
    "414": "The request target is longer than the listener's limit (text/plain).",
    "431": "The request head is larger than the listener's limit (text/plain).",
    "500": "The model raised, or its worker died (the message says which).",
    "503": "The model is not ready (loading, failed, unloaded) or its queue is full.",
    "504": "The model ran past its response_timeout.",
}


def _errors(*statuses: str) -> dict[str, Any]:
    """The statuses every route answers (401 with --auth, the head limits) and ``statuses``."""
    return {s: ref(f"Error{s}", "responses") for s in sorted({"401", "414", "431", *statuses})}


#: What a route that runs a model can answer besides its success.
_CALL = ("400", "404", "410", "413", "500", "503", "504")


# -- the operations --------------------------------------------------------------------------

_PATH_PARAMS = {
    "model": "The model's name.",
    "version": "A version of the model.",
    "name": "A shared memory region's name.",
    "url_path": "The rest of the path, for the handler (TorchServe's url_path header).",
}

_BINARY_PARAM = param(
    _BINARY_HEADER,
    "header",
    {"type": "integer", "minimum": 0},
    "Binary tensor extension: the body is this many bytes of JSON (the inference request), "
    "then the raw bytes of each input that has parameters.binary_data_size, in input order.",
)
_OIP_BODY = body(
    "An inference request: JSON, or with the binary tensor extension "
    f"({_BINARY_HEADER}) the JSON followed by raw tensor bytes.",
    {"application/json": ref("InferenceRequest"), "application/octet-stream": BINARY},
    required=True,
)
_GENERATE_BODY = body(
    "An inference request, or Triton's generate form (the answer comes in the same form).",
    {
        "application/json": {"anyOf": [ref("InferenceRequest"), ref("GenerateRequest")]},
        "application/octet-stream": BINARY,
    },
    required=True,
)
_INFERRED = {
    "description": (
        "The inference response: JSON, or (when the request asked for binary outputs, or sent "
        f"binary inputs) the JSON part of {_BINARY_HEADER} bytes followed by raw output bytes."
    ),
    "headers": {
        _BINARY_HEADER: {
            "description": "With a binary body: the length of its JSON part.",
            "schema": {"type": "integer", "minimum": 0},
        }
    },
    "content": {
        "application/json": {"schema": ref("InferenceResponse")},
        "application/octet-stream": {"schema": BINARY},
    },
}
_GENERATED_ITEM = {"anyOf": [ref("InferenceResponse"), ref("GenerateResponse")]}
_GENERATED = response("The response, in the form of the request.", _GENERATED_ITEM)


def _events(item: Mapping[str, Any]) -> dict[str, Any]:
    """A text/event-stream answer; ``schema`` describes one event, as OpenAPI's guidance for
    server-sent events has it before 3.2's ``itemSchema``: its ``data`` is JSON of ``item``."""
    event = {
        "type": "object",
        "properties": {
            "data": {
                "type": "string",
                "contentMediaType": "application/json",
                "contentSchema": {"anyOf": [dict(item), ref("Error")]},
            },
            "event": {"type": "string"},
            "id": {"type": "string"},
            "retry": {"type": "integer"},
        },
        "required": ["data"],
    }
    return response(
        "Server-sent events: one 'data: <JSON>' event per item the model yields (in the form "
        'of the request), and a last event {"error": ...} if the model fails after the '
        "first item.",
        event,
        "text/event-stream",
    )


_ANY_BODY = body(
    "Whatever the model takes: JSON arrives parsed, anything else as bytes.", {"*/*": {}}
)
_MODEL_SET = response(
    "A status the model's handler set (TorchServe's set_response_status).", {}, "*/*"
)
_PREDICTED = response(
    "What the model returned: JSON, text, bytes, or a stream of chunks.", {}, "*/*"
)
_DOCUMENT = response("This document (OpenAPI 3.1).", ref("OpenApiDocument"))


def _op(summary: str, ok: dict[str, Any], *statuses: str, body: Any = None) -> Operation:
    """An operation that answers ``ok`` (200) and the errors of ``statuses``."""
    return Operation(summary, {"200": ok, **_errors(*statuses)}, body=body)


def _infer(summary: str, stream: bool = False) -> Operation:
    return Operation(
        summary,
        {"200": _events(ref("InferenceResponse")) if stream else _INFERRED, **_errors(*_CALL)},
        parameters=(_BINARY_PARAM,),
        body=_OIP_BODY,
    )


def _generate(summary: str, stream: bool = False) -> Operation:
    return Operation(
        summary,
        {"200": _events(_GENERATED_ITEM) if stream else _GENERATED, **_errors(*_CALL)},
        parameters=(_BINARY_PARAM,),
        body=_GENERATE_BODY,
    )


def _ready(
    summary: str,
    schema: str,
    *statuses: str,
    when: tuple[str, str] = ("Ready.", "Not ready."),
    not_ready: str = "503",
) -> Operation:
    """A readiness check: 200 when ready, ``not_ready`` when not (``when`` says each), both
    with a body of ``schema``."""
    return Operation(
        summary,
        {
            "200": response(when[0], ref(schema)),
            not_ready: response(when[1], ref(schema)),
            **_errors(*statuses),
        },
    )


def _predictions(summary: str) -> Operation:
    # Errors under /predictions are in TorchServe's shape (server/_ts_errors.py); 401 and the
    # connection's 414 / 431 are the listener's own.
    ts_errors = {s: response(_WHY[s], ref("TorchServeError")) for s in _CALL}
    return Operation(
        summary,
        {"200": _PREDICTED, **_errors(), **ts_errors, "default": _MODEL_SET},
        body=_ANY_BODY,
    )


# -- Truss's routes (errors: {"error"} with X-BASETEN-ERROR-SOURCE and X-BASETEN-ERROR-CODE) --

_TRUSS_SCHEMA = {
    "type": "object",
    "properties": {
        "input_schema": {"type": ["object", "null"]},
        "output_schema": {"type": ["object", "null"]},
        "supports_streaming": {"type": ["boolean", "null"]},
    },
    "required": ["input_schema", "output_schema", "supports_streaming"],
}
_TRUSS_BODY = body(
    "JSON, or Truss's MessagePack with content-type application/octet-stream.",
    {"application/json": {}, "application/octet-stream": BINARY},
)
_TRUSS_ANSWER = response(
    "What the model returned: JSON (MessagePack to a MessagePack request), a stream of "
    "chunks (application/octet-stream; one JSON string to accept: application/json), or the "
    "response the model made.",
    {},
    "*/*",
)


def _truss_ready(summary: str) -> Operation:
    return _op(summary, response("Ready.", {"type": "object", "maxProperties": 0}), "404", "503")


def _truss_call(summary: str) -> Operation:
    return Operation(
        summary,
        {"200": _TRUSS_ANSWER, **_errors(*_CALL), "default": _MODEL_SET},
        body=_TRUSS_BODY,
    )


_DESCRIBE = _op("This API description (TorchServe's).", _DOCUMENT)

# -- Triton's shared memory extensions -------------------------------------------------------

_REGISTER_BODY = body(
    "The shared memory object (its key) and the region in it.",
    {"application/json": ref("RegionRegister")},
    required=True,
)
_REGIONS = response(
    "The registered regions (all, or the one named).",
    {"type": "array", "items": ref("RegionStatus")},
)
_CUDA_REGIONS = response(
    "None: Podium has no CUDA shared memory.", {"type": "array", "maxItems": 0}
)


_METADATA = response("The metadata.", ref("ModelMetadata"))
_CONFIG = response("The configuration.", ref("ModelConfiguration"))
_STATISTICS = response(
    "Each version's requests and their times (docs/metrics.md).", ref("StatisticsResponse")
)

#: Per operation id of :data:`INFERENCE_ROUTES`: what the table does not say.
_OPERATIONS: dict[str, Operation] = {
    "serverMetadata": _op(
        "The server's name, version and OIP extensions.",
        response("The metadata.", ref("ServerMetadata")),
    ),
    "serverLive": _op("Liveness: the server answers.", response("Live.", ref("ServerLive"))),
    "serverReady": _ready("Readiness: every model that should serve does.", "ServerReady"),
    "modelMetadata": _op("The default version's metadata.", _METADATA, "404"),
    "modelVersionMetadata": _op("A version's metadata.", _METADATA, "404"),
    "modelReady": _ready("Whether the default version is ready.", "ModelReady", "404"),
    "modelVersionReady": _ready("Whether a version is ready.", "ModelReady", "404"),
    "modelConfig": _op(
        "The default version's configuration, as Triton's ModelConfig.", _CONFIG, "404"
    ),
    "modelVersionConfig": _op(
        "A version's configuration, as Triton's ModelConfig.", _CONFIG, "404"
    ),
    "repositoryIndex": _op(
        "Every model version and its state (Triton's repository index).",
        response("The index.", ref("RepositoryIndex")),
        "400",
        "413",
        body=_INDEX_BODY,
    ),
    "repositoryModelLoad": _op(
        "Load every version of the model again (with --model-control inference).",
        _DONE,
        "400",
        "403",
        "404",
        "413",
        "500",
        body=_control_body(
            {
                "config": {
                    "type": "string",
                    "description": "Triton's ModelConfig as JSON: what the model declares.",
                }
            }
        ),
    ),
    "repositoryModelUnload": _op(
        "Stop serving every version of the model (with --model-control inference).",
        _DONE,
        "400",
        "403",
        "404",
        "413",
        body=_control_body({"unload_dependents": {"type": "boolean"}}),
    ),
    "modelInfer": _infer("Inference on the default version."),
    "modelVersionInfer": _infer("Inference on a version."),
    "modelInferStream": _infer("Streaming inference (server-sent events).", stream=True),
    "modelVersionInferStream": _infer("Streaming inference on a version.", stream=True),
    "modelGenerate": _generate("Generate (tensor form or Triton's)."),
    "modelVersionGenerate": _generate("Generate on a version."),
    "modelGenerateStream": _generate("Streaming generate (server-sent events).", stream=True),
    "modelVersionGenerateStream": _generate("Streaming generate on a version.", stream=True),
    "statistics": _op(
        "Statistics of every version of every model (Triton's statistics extension).", _STATISTICS
    ),
    "modelStatistics": _op("Statistics of every version of a model.", _STATISTICS, "404"),
    "modelVersionStatistics": _op("Statistics of a version.", _STATISTICS, "404"),
    "openApiDocument": _op("This API description (MLServer's place).", _DOCUMENT),
    "docsPage": _op(
        "A page that lists these operations and tries them out.",
        response("The page.", {"type": "string"}, "text/html"),
    ),
    "inferenceApiDescription": _DESCRIBE,
    "inferenceApiDescriptionLegacy": Operation(
        "This API description (TorchServe's legacy path).",
        {"200": _DOCUMENT, **_errors()},
        deprecated=True,
    ),
    "shmStatus": _op("Every registered system shared memory region.", _REGIONS, "403"),
    "shmRegionStatus": _op(
        "A registered system shared memory region.", _REGIONS, "400", "403", "404"
    ),
    "shmRegister": _op(
        "Register a region of a POSIX shared memory object (--shared-memory system).",
        _DONE,
        "400",
        "403",
        "409",
        "413",
        body=_REGISTER_BODY,
    ),
    "shmUnregisterAll": _op("Unregister every system shared memory region.", _DONE, "403"),
    "shmUnregister": _op("Unregister a system shared memory region.", _DONE, "400", "403", "404"),
    "cudaShmStatus": _op("CUDA shared memory regions: none.", _CUDA_REGIONS),
    "cudaShmRegionStatus": _op(
        "A CUDA shared memory region: none exists.", _CUDA_REGIONS, "400", "404"
    ),
    "cudaShmRegister": _op("CUDA shared memory: refused (no GPUs).", _DONE, "400"),
    "cudaShmUnregisterAll": _op("Unregister every CUDA shared memory region: none.", _DONE),
    "cudaShmUnregister": _op("Unregister a CUDA shared memory region: none.", _DONE),
    "ping": _ready(
        "TorchServe's health check: Healthy when every model is ready.",
        "Ping",
        when=("Every model is ready.", "Some model is not ready."),
        not_ready="500",
    ),
    "predictions": _predictions("TorchServe predictions on the default version."),
    "versionPredictions": _predictions("TorchServe predictions on a version."),
    "versionPredictionsPath": _predictions(
        "TorchServe predictions on a version; the rest of the path reaches the handler as the "
        "request header url_path."
    ),
    "explanations": _predictions("TorchServe explanations on the default version."),
    "versionExplanations": _predictions("TorchServe explanations on a version."),
    "versionExplanationsPath": _predictions(
        "TorchServe explanations on a version; the rest of the path reaches the handler as the "
        "request header url_path."
    ),
    "trussLive": _op("Truss: liveness (true).", response("Live.", {"const": True})),
    "trussReady": _truss_ready("Truss: ready and healthy (the model's is_healthy): {}."),
    "trussLoaded": _truss_ready("Truss: loaded (its health unasked): {}."),
    "trussSchema": _op(
        "Truss: the model's input and output schema (from its pydantic annotations).",
        response("input_schema, output_schema, supports_streaming.", _TRUSS_SCHEMA),
        "404",
        "503",
    ),
    "trussPredict": _truss_call("Truss: predict (the model may take the raw request)."),
    "trussPredictBinary": _truss_call("Truss: predict (Truss's route for MessagePack bodies)."),
    "trussInvocations": _truss_call("SageMaker's invocations: predict on the one model served."),
    **{
        name: _truss_call(f"Truss: the model method {method} (of the model that defines it).")
        for method, name in ENDPOINT_PATHS.values()
    },
    # OpenAI's API (docs/openai.md); where a model defines the Truss method, Truss's (above)
    "openaiHealth": _op(
        "vLLM's health check, as OpenAI load tools poll it: the server's readiness, no body.",
        {"description": "Ready (no body)."},
        "503",
    ),
    "openaiModels": _op("OpenAI: the models that serve OpenAI's API.", response("A list.", {})),
    **{
        name: _truss_call(
            f"OpenAI: {what} (docs/openai.md); Truss's model method {method} where the model "
            "named defines it."
        )
        for name, what, method in (
            ("chatCompletions", "chat completions", "chat_completions"),
            ("completions", "completions", "completions"),
            ("embeddings", "embeddings", "embeddings"),
        )
    },
}

_TAGS = [
    {"name": "oip_rest", "description": "Open Inference Protocol v2 (KServe, Triton, MLServer)."},
    {"name": "torchserve_rest", "description": "TorchServe's inference API."},
    {"name": "truss", "description": "Truss's model server's routes (and its OpenAI-style ones)."},
    {
        "name": "openai",
        "description": "OpenAI's API: models, chat completions, completions, embeddings.",
    },
]


def description(routes: RouteTable) -> dict[str, Any]:
    """The OpenAPI 3.1 document of the inference listener's ``routes``."""
    return describe(
        routes,
        info={
            "title": "Podium inference API (OIP v2, TorchServe, Truss)",
            "version": __version__,
        },
        operations=_OPERATIONS,
        path_params=_PATH_PARAMS,
        components=_components(),
        tags=_TAGS,
    )
