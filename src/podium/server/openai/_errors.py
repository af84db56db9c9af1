"""Errors in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``.

The status is Podium's one table's (``errors.http_status``); ``type`` and ``code`` are OpenAI's
words for it (``invalid_request_error`` for a client's fault, ``server_error`` for Podium's or
the model's), ``param`` names the field at fault where one is (:class:`OpenAIInvalid`). A 503
(the queue is full, the model is loading, the server is stopping) carries ``Retry-After``, which
the ``openai`` client honours when it retries. A model's failure is a 500 whose message names the
model and the method, never its traceback.

After a stream has started the status is sent already: the error goes as one SSE event,
``data: {"error": ...}``, followed by ``data: [DONE]`` (:func:`error_event`).
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec

from ...errors import (
    ModelError,
    NotFound,
    PayloadTooLarge,
    PodiumError,
    QueueFull,
    Unauthenticated,
    Unavailable,
    http_status,
)
from ._protocol import OpenAIInvalid

__all__ = [
    "PATHS",
    "RETRY_AFTER_S",
    "error_body",
    "error_event",
    "is_openai_path",
    "send_openai_error",
]

#: OpenAI's paths: their errors are in OpenAI's shape, also where no handler runs (a 405, a 401).
PATHS = frozenset({"/v1/models", "/v1/chat/completions", "/v1/completions", "/v1/embeddings"})


def is_openai_path(path: str) -> bool:
    """Whether ``path`` is one of OpenAI's (its errors are in OpenAI's shape)."""
    return path in PATHS


logger = logging.getLogger("podium.openai")

#: Seconds a client is told to wait before it tries again after a 503.
RETRY_AFTER_S = 1

_encoder = msgspec.json.Encoder()


def _kind(exc: PodiumError, status: int) -> tuple[str, str | None]:
    """OpenAI's ``type`` and ``code`` for ``exc``."""
    if isinstance(exc, Unauthenticated):
        return "invalid_request_error", "invalid_api_key"
    if isinstance(exc, NotFound):
        code = "model_not_found" if "model" in exc.message else "not_found"
        return "invalid_request_error", code
    if isinstance(exc, PayloadTooLarge):
        return "invalid_request_error", "request_too_large"
    if isinstance(exc, QueueFull):
        return "server_error", "queue_full"
    if isinstance(exc, Unavailable):
        return "server_error", "service_unavailable"
    if isinstance(exc, ModelError):
        return "server_error", "model_error"
    if status >= 500:
        return "server_error", None
    return "invalid_request_error", None


def error_body(exc: PodiumError) -> tuple[int, dict[str, Any]]:
    """The status and the body OpenAI's API would answer ``exc`` with."""
    status = http_status(exc)
    kind, code = _kind(exc, status)
    param = exc.param if isinstance(exc, OpenAIInvalid) else None
    return status, {"error": {"message": exc.message, "type": kind, "param": param, "code": code}}


async def send_openai_error(
    send: Any, exc: PodiumError, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    """``exc`` as a whole response (the stream has not started); ``extra``: more headers."""
    status, body = error_body(exc)
    if status >= 500:
        logger.warning("%s %s", status, exc.message)
    data = _encoder.encode(body)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    if status == 503:
        headers.append((b"retry-after", str(RETRY_AFTER_S).encode()))
    headers.extend(extra or ())
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


def error_event(exc: PodiumError) -> bytes:
    """``exc`` as the last events of a stream already started: the error, then ``[DONE]``."""
    status, body = error_body(exc)
    if status >= 500:
        logger.warning("%s %s (in a stream)", status, exc.message)
    body["error"]["code"] = body["error"]["code"] or status
    return b"data: " + _encoder.encode(body) + b"\n\ndata: [DONE]\n\n"
