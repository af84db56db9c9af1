"""The management API's description (``OPTIONS /``), an OpenAPI 3.0.1 document as TorchServe
answers there: enough for a client generator to know every route and parameter."""

from __future__ import annotations

from typing import Any

from ... import __version__

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


def description() -> dict[str, Any]:
    """The OpenAPI document of every management route."""
    return {
        "openapi": "3.0.1",
        "info": {"title": "Podium management API (TorchServe-compatible)", "version": __version__},
        "paths": {
            "/": {"options": _op("apiDescription", "This description.", [])},
            "/models": {
                "get": _op(
                    "listModels",
                    "List registered models.",
                    [
                        _param("limit", "query", "integer", "Page size (1-100) [100]."),
                        _param("next_page_token", "query", "integer", "Where the page starts."),
                    ],
                ),
                "post": _op("registerModel", "Register a model.", _REGISTER),
            },
            "/models/{model_name}": {
                "get": _op("describeModel", "Describe the default version.", [_M]),
                "put": _op("setAutoScale", "Scale the default version's workers.", [_M, *_SCALE]),
                "delete": _op("unregisterModel", "Unregister every version.", [_M]),
            },
            "/models/{model_name}/{model_version}": {
                "get": _op("describeModelVersion", "Describe a version (or all).", [_M, _V]),
                "put": _op("setAutoScaleVersion", "Scale a version's workers.", [_M, _V, *_SCALE]),
                "delete": _op("unregisterModelVersion", "Unregister a version.", [_M, _V]),
            },
            "/models/{model_name}/{model_version}/set-default": {
                "put": _op("setDefault", "Make a version the default.", [_M, _V]),
            },
            "/token": {
                "post": _op(
                    "token",
                    "Replace a key (with --auth; needs the API key).",
                    [_param("type", "query", "string", "management or inference", True)],
                )
            },
        },
    }
