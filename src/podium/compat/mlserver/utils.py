"""``mlserver.utils``: helpers runtimes call (model URIs, ids, headers)."""

from __future__ import annotations

import asyncio
import os
import urllib.parse
import uuid
from collections.abc import Callable
from typing import Any

from .errors import InvalidModelURI
from .logging import logger
from .types import InferenceRequest, InferenceResponse, Parameters

__all__ = [
    "extract_headers",
    "generate_uuid",
    "get_model_uri",
    "get_wrapped_method",
    "insert_headers",
    "schedule_with_callback",
    "to_absolute_path",
]


async def get_model_uri(settings: Any, wellknown_filenames: list[str] | None = None) -> str:
    """The model's artefact path: ``parameters.uri`` made absolute next to model-settings.json;
    in a folder, the first of ``wellknown_filenames`` that exists, else the folder. A URI with
    another scheme (``s3://``...) is returned as it is; a path that does not exist raises
    ``InvalidModelURI``."""
    return _model_uri(settings, wellknown_filenames or [])


def _model_uri(settings: Any, wellknown_filenames: list[str]) -> str:
    uri = settings.parameters.uri if settings.parameters else None
    if not uri:
        raise InvalidModelURI(settings.name)
    parts = urllib.parse.urlparse(uri, scheme="file")
    if parts.scheme != "file":
        return str(uri)
    path = to_absolute_path(settings, parts.path)
    if os.path.isfile(path):
        return path
    if os.path.isdir(path):
        for name in wellknown_filenames:
            candidate = os.path.join(path, name)
            if os.path.isfile(candidate):
                return candidate
        return path
    raise InvalidModelURI(settings.name, path)


def to_absolute_path(model_settings: Any, uri: str) -> str:
    """``uri`` relative to the folder of the model's settings file (else as it is)."""
    source = getattr(model_settings, "_source", None)
    if source is None:
        return uri
    return os.path.normpath(os.path.join(os.path.dirname(source), uri))


def get_wrapped_method(f: Callable[..., Any]) -> Callable[..., Any]:
    while hasattr(f, "__wrapped__"):
        f = f.__wrapped__
    return f


def generate_uuid() -> str:
    return str(uuid.uuid4())


def insert_headers(
    inference_request: InferenceRequest, headers: dict[str, str]
) -> InferenceRequest:
    """Put the call's headers in ``parameters.headers`` (replacing any the client sent there)."""
    if inference_request.parameters is None:
        inference_request.parameters = Parameters()
    if inference_request.parameters.headers is not None:
        logger.warning(
            "the 'headers' field of the request's parameters is replaced by the call's "
            "headers and should not be set by clients"
        )
    inference_request.parameters.headers = headers
    return inference_request


def extract_headers(inference_response: InferenceResponse) -> dict[str, str] | None:
    """Take ``parameters.headers`` out of a response (``None`` if there are none)."""
    parameters = inference_response.parameters
    if parameters is None or parameters.headers is None:
        return None
    headers = parameters.headers
    parameters.headers = None
    return headers


def schedule_with_callback(
    coro: Any, cb: Callable[[asyncio.Task[Any]], object]
) -> asyncio.Task[Any]:
    """Run ``coro`` as a task on the running loop and call ``cb(task)`` once it is done."""
    task = asyncio.create_task(coro)
    task.add_done_callback(cb)
    return task
