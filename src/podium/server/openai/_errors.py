"""Errors in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``.

The status is Podium's one table's (``errors.http_status``); ``type`` and ``code`` are OpenAI's
words for it (``invalid_request_error`` for a client's fault, ``server_error`` for Podium's or
the model's), ``param`` names the field at fault where one is (:class:`OpenAIInvalid`). A 503
(the queue is full, the model is loading, the server is stopping) carries ``Retry-After``, which
the ``openai`` client honours when it retries. A model's failure is a 500 whose message names the
model and the method, never its traceback.

After a stream has started the status is sent already: the error goes as one SSE event,
``data: {"error": ...}``, followed by ``data: [DONE]`` (:func:`error_event`). :func:`send_events`
is how a stream starts only with its first event (OpenAI's and OIP's generate streams).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Callable
from typing import Any

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
from ..http._responses import (
    JSON,
    NOTHING,
    SSE,
    encoder,
    retry_headers,
    send_body,
    send_stream,
    sse_event,
)
from ._protocol import OpenAIInvalid

__all__ = [
    "DONE",
    "PATHS",
    "error_body",
    "error_event",
    "is_openai_path",
    "send_events",
    "send_openai_error",
]

#: OpenAI's paths: their errors are in OpenAI's shape, also where no handler runs (a 405, a 401).
PATHS = frozenset({"/v1/models", "/v1/chat/completions", "/v1/completions", "/v1/embeddings"})


def is_openai_path(path: str) -> bool:
    """Whether ``path`` is one of OpenAI's (its errors are in OpenAI's shape)."""
    return path in PATHS


logger = logging.getLogger("podium.openai")

#: The last event of every OpenAI stream.
DONE = b"data: [DONE]\n\n"

#: ``Retry-After`` of a 503 whose refusal gives no advice of its own (``retry_after``).
_RETRY = [(b"retry-after", b"1")]

#: OpenAI's ``code`` for each kind of error, the first that ``exc`` is an instance of.
_CODES: list[tuple[type[PodiumError], str]] = [
    (Unauthenticated, "invalid_api_key"),
    (PayloadTooLarge, "request_too_large"),
    (QueueFull, "queue_full"),
    (Unavailable, "service_unavailable"),
    (ModelError, "model_error"),
]


def error_body(exc: PodiumError) -> tuple[int, dict[str, Any]]:
    """The status and the body OpenAI's API would answer ``exc`` with."""
    status = http_status(exc)
    kind = "server_error" if status >= 500 else "invalid_request_error"
    code = next((code for cls, code in _CODES if isinstance(exc, cls)), None)
    if isinstance(exc, NotFound):
        code = "model_not_found" if "model" in exc.message else "not_found"
    param = exc.param if isinstance(exc, OpenAIInvalid) else None
    return status, {"error": {"message": exc.message, "type": kind, "param": param, "code": code}}


async def send_openai_error(
    send: Any, exc: PodiumError, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    """``exc`` as a whole response (the stream has not started); ``extra``: more headers. A 503
    always says when to retry (the ``openai`` client honours it)."""
    status, body = error_body(exc)
    if status >= 500:
        logger.warning("%s %s", status, exc.message)
    retry = retry_headers(exc) or (_RETRY if status == 503 else [])
    await send_body(send, status, JSON + (extra or []) + retry, encoder.encode(body))


def error_event(exc: PodiumError) -> bytes:
    """``exc`` as the last events of a stream already started: the error, then ``[DONE]``."""
    status, body = error_body(exc)
    if status >= 500:
        logger.warning("%s %s (in a stream)", status, exc.message)
    body["error"]["code"] = body["error"]["code"] or status
    return sse_event(body) + DONE


async def send_events(
    send: Any,
    events: AsyncGenerator[Any, None],
    tail: Callable[[PodiumError], bytes],
    done: bytes = b"",
) -> None:
    """``events`` (each a JSON object) as Server-Sent Events. The response starts with the first
    event, so an error before it is a whole response with its status (raised here); an error
    after it ends the stream as ``tail(error)`` says, and ``done`` ends it otherwise."""

    def failed(exc: Exception) -> bytes:
        if not isinstance(exc, PodiumError):
            logger.exception("a stream of generated text failed")
            exc = PodiumError(f"internal error: {type(exc).__name__}")
        return tail(exc)

    try:
        first = await anext(events, NOTHING)
        await send_stream(send, first, events, SSE, sse_event, failed, done)
    finally:
        await events.aclose()
