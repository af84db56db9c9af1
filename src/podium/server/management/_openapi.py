"""The management API's description (``OPTIONS /``), an OpenAPI 3.0.1 document as TorchServe
answers there: enough for a client generator to know every route and parameter.

Its paths and methods are the route table's (:data:`MANAGEMENT_ROUTES`), so the description
cannot drift from what is served; this module adds what a table does not know: per operation
(the route's name) a summary and the query parameters, per path parameter a description.
"""

from __future__ import annotations

from typing import Any

from ... import __version__
from ..http import RouteTable

__all__ = ["description"]
_STATUS = {"type": "object", "properties": {"status": {"type": "string"}}}
_ERROR = {
    "type": "object",
    "properties": {
        "code": {"type": "integer"},
        "type": {"type": "string"},
        "message": {"type": "string"},
    },
}


def _param(name: str, where: str, kind: str, text: str, required: bool = False) -> dict[str, Any]:
    return {
        "name": name,
        "in": where,
        "required": required or where == "path",
        "description": text,
        "schema": {"type": kind},
    }


_M = _param("model_name", "path", "string", "The model's name.")
_V = _param("model_version", "path", "string", "A version of the model ('all' to describe all).")
_SYNC = _param("synchronous", "query", "boolean", "Wait for the workers (else 202).")
_SCALE = [
    _param("min_worker", "query", "integer", "Workers to run [1]."),
    _param("max_worker", "query", "integer", "Most workers [min_worker]."),
    _SYNC,
    _param("timeout", "query", "integer", "Accepted and ignored."),
]
_REGISTER = [
    _param("url", "query", "string", "Local path, model-store file or allowed URL.", True),
    _param("model_name", "query", "string", "Name to register the model under."),
    _param("batch_size", "query", "integer", "Dynamic batch size."),
    _param("max_batch_delay", "query", "integer", "Batch delay in milliseconds."),
    _param("initial_workers", "query", "integer", "Workers to start (min_workers)."),
    _param("response_timeout", "query", "integer", "Seconds a predict may run."),
    _SYNC,
]


def _op(op_id: str, summary: str, params: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "operationId": op_id,
        "summary": summary,
        "parameters": params,
        "responses": {
            "200": {"description": "OK", "content": {"application/json": {"schema": _STATUS}}},
            "default": {
                "description": "Error",
                "content": {"application/json": {"schema": _ERROR}},
            },
        },
    }


#: Per operation id: its summary and its query parameters.
_OPERATIONS: dict[str, tuple[str, list[dict[str, Any]]]] = {
    "apiDescription": ("This description.", []),
    "listModels": (
        "List registered models.",
        [
            _param("limit", "query", "integer", "Page size (1-100) [100]."),
            _param("next_page_token", "query", "integer", "Where the page starts."),
        ],
    ),
    "registerModel": ("Register a model.", _REGISTER),
    "describeModel": ("Describe the default version.", []),
    "setAutoScale": ("Scale the default version's workers.", _SCALE),
    "unregisterModel": ("Unregister every version.", []),
    "describeModelVersion": ("Describe a version (or all).", []),
    "setAutoScaleVersion": ("Scale a version's workers.", _SCALE),
    "unregisterModelVersion": ("Unregister a version.", []),
    "setDefault": ("Make a version the default.", []),
    "token": (
        "Replace a key (with --auth; needs the API key).",
        [_param("type", "query", "string", "management or inference", True)],
    ),
    "tokenGet": (
        "Replace a key, as TorchServe 0.9's token plugin answered GET.",
        [_param("type", "query", "string", "management or inference", True)],
    ),
}
_PATH_PARAMS = {"model_name": _M, "model_version": _V}


def description(routes: RouteTable) -> dict[str, Any]:
    """The OpenAPI document of every route of ``routes`` (the management table).

    ``KeyError`` names an operation or a path parameter this module does not describe (a test
    builds the document from the real table).
    """
    paths: dict[str, dict[str, Any]] = {}
    for template, method, op_id, route in routes.operations():
        summary, query = _OPERATIONS[op_id]
        params = [_PATH_PARAMS[name] for name in route.params]
        paths.setdefault(template, {})[method.lower()] = _op(op_id, summary, [*params, *query])
    return {
        "openapi": "3.0.1",
        "info": {"title": "Podium management API (TorchServe-compatible)", "version": __version__},
        "paths": paths,
    }
