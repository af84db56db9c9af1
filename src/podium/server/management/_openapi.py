"""The management listener's description: what :data:`MANAGEMENT_ROUTES` does not say about its
operations (summaries, query parameters, every status each route answers), for
``server/_openapi.py``. Served as TorchServe serves it (``OPTIONS /``, ``GET /api-description``),
in OpenAPI 3.1 (TorchServe's is 3.0.1; the routes and parameters are the same).

Every answer is TorchServe's JSON: ``{"status": "..."}`` on success (or the list and
descriptions), ``{"code", "type", "message"}`` on failure, including the browser guard's
refusals (403, 415, 421; ``server/_guard.py``).
"""

from __future__ import annotations

from typing import Any

from ... import __version__
from .._openapi import (
    DOCUMENT_SCHEMA,
    TORCHSERVE_ERROR,
    Operation,
    body,
    describe,
    error_responses,
    param,
    ref,
    response,
)
from ..http import RouteTable

__all__ = ["description"]

_STATUS = {"type": "object", "properties": {"status": {"type": "string"}}, "required": ["status"]}
_LIST = {
    "type": "object",
    "properties": {
        "nextPageToken": {"type": "string"},
        "models": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"modelName": {"type": "string"}, "modelUrl": {"type": "string"}},
                "required": ["modelName", "modelUrl"],
            },
        },
    },
    "required": ["models"],
}
_DESCRIPTION = {
    "type": "array",
    "description": "TorchServe's description of each version, with Podium's additions.",
    "items": {
        "type": "object",
        "properties": {
            "modelName": {"type": "string"},
            "modelVersion": {"type": ["string", "null"]},
            "modelUrl": {"type": "string"},
            "runtime": {"type": "string"},
            "minWorkers": {"type": "integer"},
            "maxWorkers": {"type": "integer"},
            "batchSize": {"type": "integer"},
            "maxBatchDelay": {"type": "number"},
            "responseTimeout": {"type": ["number", "null"]},
            "jobQueueSize": {"type": ["integer", "null"]},
            "loadedAtStartup": {"type": "boolean"},
            "workers": {"type": "array", "items": {"type": "object"}},
            "default": {"type": "boolean"},
            "state": {"type": "string"},
            "workerKind": {"type": "string"},
            "queue": {"type": "object"},
            "loadError": {"type": "string"},
            "reason": {"type": "string"},
        },
        "required": ["modelName", "modelVersion", "workers", "state"],
    },
}

_WHY = {
    "400": "A parameter is missing or wrong (named).",
    "401": "No valid key: the management key (the API key for /token).",
    "403": "A web page's request (Origin or Sec-Fetch-Site); see docs/security.md.",
    "404": "No such model, version or url (or /token without --auth).",
    "409": "The model version is registered already.",
    "413": "The body is larger than 1 MiB.",
    "414": "The request target is longer than the listener's limit (text/plain).",
    "415": "A body type a web page can send (text/plain, forms); send JSON or none.",
    "421": "A Host that is neither an IP address, localhost nor an allowed name.",
    "431": "The request head is larger than the listener's limit (text/plain).",
    "500": "The model failed to load, or the operation failed (the message says which).",
    "503": "The model cannot take the change now.",
}
#: What every route can answer: the key, the browser guard's and the connection's refusals.
_ALWAYS = ("401", "403", "414", "415", "421", "431")


def _answers(ok: dict[str, Any], *statuses: str) -> dict[str, Any]:
    errors = {s: ref(f"Error{s}", "responses") for s in sorted({*_ALWAYS, *statuses})}
    return {**ok, **errors}


def _status(text: str = "Done.", accepted: bool = False) -> dict[str, Any]:
    out = {"200": response(text, ref("Status"))}
    if accepted:
        out["202"] = response("Accepted: the workers are updated in the background.", ref("Status"))
    return out


_SYNC = param("synchronous", "query", {"type": "boolean"}, "Wait for the workers (else 202).")
_SCALE = (
    param("min_worker", "query", {"type": "integer"}, "Workers to run [1]."),
    param("max_worker", "query", {"type": "integer"}, "Most workers [min_worker]."),
    _SYNC,
    param("timeout", "query", {"type": "integer"}, "Accepted and ignored."),
)
_REGISTER = (
    param("url", "query", {"type": "string"}, "Local path, model-store file or allowed URL.", True),
    param("model_name", "query", {"type": "string"}, "Name to register the model under."),
    param("batch_size", "query", {"type": "integer"}, "Dynamic batch size."),
    param("max_batch_delay", "query", {"type": "integer"}, "Batch delay in milliseconds."),
    param("initial_workers", "query", {"type": "integer"}, "Workers to start (min_workers)."),
    param("response_timeout", "query", {"type": "integer"}, "Seconds a predict may run."),
    _SYNC,
)
_REGISTER_BODY = body(
    "The same parameters as a JSON object (they override the query's).",
    {"application/json": {"type": "object"}},
)
_TOKEN = (param("type", "query", {"type": "string"}, "management or inference", True),)
_DOCUMENT = {"200": response("This document (OpenAPI 3.1).", ref("OpenApiDocument"))}
_SCALED = _answers(_status("Scaled.", accepted=True), "400", "404", "500", "503")
_GONE = _answers(_status("Unregistered."), "400", "404", "500")
_DESCRIBED = _answers({"200": response("The description.", ref("ModelDescription"))}, "404")
_REPLACED = _answers(_status("Replaced."), "400", "404")

#: Per operation id of :data:`MANAGEMENT_ROUTES`: what the table does not say.
_OPERATIONS: dict[str, Operation] = {
    "apiDescription": Operation("This description.", _answers(_DOCUMENT)),
    "apiDescriptionLegacy": Operation(
        "This description (TorchServe's legacy path).", _answers(_DOCUMENT), deprecated=True
    ),
    "listModels": Operation(
        "List registered models.",
        _answers({"200": response("A page of models.", ref("ModelList"))}, "400"),
        parameters=(
            param("limit", "query", {"type": "integer"}, "Page size (1-100) [100]."),
            param("next_page_token", "query", {"type": "integer"}, "Where the page starts."),
        ),
    ),
    "registerModel": Operation(
        "Register a model.",
        _answers(_status("Registered.", accepted=True), "400", "404", "409", "413", "500", "503"),
        parameters=_REGISTER,
        body=_REGISTER_BODY,
    ),
    "describeModel": Operation("Describe the default version.", _DESCRIBED),
    "setAutoScale": Operation("Scale the default version's workers.", _SCALED, _SCALE),
    "unregisterModel": Operation("Unregister every version.", _GONE),
    "describeModelVersion": Operation("Describe a version (or all).", _DESCRIBED),
    "setAutoScaleVersion": Operation("Scale a version's workers.", _SCALED, _SCALE),
    "unregisterModelVersion": Operation("Unregister a version.", _GONE),
    "setDefault": Operation(
        "Make a version the default.", _answers(_status("Done."), "400", "404")
    ),
    "token": Operation("Replace a key (with --auth; needs the API key).", _REPLACED, _TOKEN),
    "tokenGet": Operation(
        "Replace a key, as TorchServe 0.9's token plugin answered GET.", _REPLACED, _TOKEN
    ),
}
_PATH_PARAMS = {
    "model_name": "The model's name.",
    "model_version": "A version of the model ('all' to describe all).",
}


def description(routes: RouteTable) -> dict[str, Any]:
    """The OpenAPI 3.1 document of the management listener's ``routes``."""
    return describe(
        routes,
        info={"title": "Podium management API (TorchServe-compatible)", "version": __version__},
        operations=_OPERATIONS,
        path_params=_PATH_PARAMS,
        components={
            "schemas": {
                "Status": _STATUS,
                "Error": TORCHSERVE_ERROR,
                "ModelList": _LIST,
                "ModelDescription": _DESCRIPTION,
                "OpenApiDocument": DOCUMENT_SCHEMA,
            },
            "responses": error_responses(_WHY),
        },
        tags=[{"name": "management", "description": "TorchServe's management API."}],
    )
