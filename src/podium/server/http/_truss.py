"""Truss's routes, answered as the Truss model server answers them.

Handlers of :class:`~podium.server.http.HttpApp` (their routes are in ``INFERENCE_ROUTES``):

- ``GET /`` liveness (``true``); ``GET /v1/models/{m}`` readiness (``{}``, or 503 when not ready
  or not healthy: ``DataPlane.model_healthy``), ``.../loaded`` (ready, its health unasked),
  ``.../schema`` (the model's ``io_schema``; 404 "No schema found", 503 while not ready);
- ``POST /v1/models/{m}:predict`` and ``:predict_binary``, ``POST /invocations`` (SageMaker's);
- the OpenAI-style ``POST /v1/chat/completions``, ``/v1/completions``, ``/v1/embeddings``,
  ``/v1/messages``, ``/v1/responses``, which call the model method of that name;
- WebSockets on ``/v1/websocket`` and ``/v1/models/{m}/websocket`` (:func:`serve_websocket`).

Truss's server serves one model and ignores the name in its paths: where Podium serves exactly
one model (``DataPlane.sole_model``) any name reaches it, else the name picks the model (404).

Bodies are JSON, or Truss's MessagePack with ``content-type: application/octet-stream``
(answered in kind; ``_truss_wire``). A result that is a generator streams as
``application/octet-stream`` chunks, or is gathered into one JSON string when the client sends
``accept: application/json`` (unless its user agent is OpenAI's SDK, which sends that header
while it streams). A stream that fails after it began is logged and ended, as Truss ends it.

Every error is in Truss's shape (``errors.py`` of Truss's server): ``{"error": message}`` with
``X-BASETEN-ERROR-SOURCE: 04`` and ``X-BASETEN-ERROR-CODE``: ``600`` where the model or its
readiness is the cause (a model error is "Internal Server Error (in model/chainlet).", an
``HTTPException`` the model raised keeps its status and detail), ``700`` where the request is
(malformed bodies, unknown models and methods), ``500`` for the unexpected (an answer that cannot
be encoded). A ``Response`` the model returns is sent as it is, with those headers (code 700)
when its status is 300 or more.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ...errors import (
    BadModelOutput,
    ModelError,
    ModelNotReady,
    ModelStatus,
    NotFound,
    PodiumError,
    Unavailable,
    http_status,
)
from ...types import (
    ENDPOINT_METHODS,
    AnswerStream,
    Call,
    InputKind,
    Reply,
    Returned,
    WireProtocol,
    is_response,
)
from .._asgi import Message, Receive, Scope, Send
from .._headers import Headers
from . import _responses, _truss_wire
from ._exchange import Exchange
from ._responses import JSON, OCTETS, chunk_of, send_body

if TYPE_CHECKING:
    from ...dataplane import DataPlane, ModelVersion
    from ._app import HttpApp

__all__ = [
    "ENDPOINT_PATHS",
    "MODEL_ERROR_MESSAGE",
    "defining",
    "endpoint",
    "invocations",
    "live",
    "loaded",
    "predict",
    "ready",
    "schema",
    "send_truss_error",
    "serve_websocket",
]

logger = logging.getLogger("podium.http")

#: What a client of Truss's server reads when the model raised.
MODEL_ERROR_MESSAGE = "Internal Server Error (in model/chainlet)."
#: The close of a WebSocket whose model raised (Truss's), and of one nobody serves.
WEBSOCKET_MODEL_ERROR = 1011
WEBSOCKET_NOT_SERVED = 1003
WEBSOCKET_NOT_SERVED_REASON = "WebSocket is not implemented on this deployment."

#: The OpenAI-style paths: the model method each calls, and its route's name.
ENDPOINT_PATHS = {
    "/v1/chat/completions": ("chat_completions", "chatCompletions"),
    "/v1/completions": ("completions", "completions"),
    "/v1/embeddings": ("embeddings", "embeddings"),
    "/v1/messages": ("messages", "messages"),
    "/v1/responses": ("responses", "responses"),
}
if {method for method, _ in ENDPOINT_PATHS.values()} != set(ENDPOINT_METHODS):
    raise ImportError("ENDPOINT_PATHS must name every one of types.ENDPOINT_METHODS")

# X-BASETEN-ERROR-CODE: the request's fault, the model's (downstream), or unexpected.
_CLIENT, _DOWNSTREAM, _UNEXPECTED = b"700", b"600", b"500"
# Enum members a request compares, read once (on Python 3.11 a member read off its class goes
# through ``EnumType.__getattr__``, as dear as a function call).
_TRUSS = WireProtocol.TRUSS
_SCHEMA = InputKind.SCHEMA

_SOURCE = (b"x-baseten-error-source", b"04")
_CODE = b"x-baseten-error-code"

_TRUE = b"true"
_EMPTY_OBJECT = b"{}"


# -- errors ------------------------------------------------------------------------------------


def truss_error(exc: PodiumError) -> tuple[int, bytes, Any]:
    """The status, X-BASETEN-ERROR-CODE and ``error`` value Truss's server answers for ``exc``."""
    if isinstance(exc, ModelStatus):  # the model's own HTTPException: passed through
        return exc.status, _DOWNSTREAM, exc.detail
    if isinstance(exc, BadModelOutput):  # what it returned cannot be sent: Truss's fallback
        return 500, _UNEXPECTED, exc.message
    if isinstance(exc, ModelError):
        return 500, _DOWNSTREAM, MODEL_ERROR_MESSAGE
    status = http_status(exc)
    if status < 500:
        return status, _CLIENT, exc.message
    if isinstance(exc, Unavailable) or type(exc) is not PodiumError:
        return status, _DOWNSTREAM, exc.message  # not ready, queue full, worker died, timeout
    return status, _UNEXPECTED, exc.message


def error_headers(code: bytes) -> list[tuple[bytes, bytes]]:
    return [_SOURCE, (_CODE, code)]


async def send_truss_error(send: Send, exc: PodiumError) -> None:
    """``exc`` in Truss's shape (see the module docstring)."""
    status, code, message = truss_error(exc)
    if status >= 500:
        logger.warning("%s %s", status, exc.message)
    try:
        body = _responses.encoder.encode({"error": message})
    except TypeError:  # a detail the model gave that JSON cannot carry: its text
        body = _responses.encoder.encode({"error": exc.message})
    headers = [*JSON, *error_headers(code), *_responses.retry_headers(exc)]
    await send_body(send, status, headers, body)


def _not_ready(name: str, reason: str | None = None) -> ModelNotReady:
    """Truss's message, with Podium's reason after it where there is one (Truss's own
    ``ModelNotReady`` takes such a detail): a client learns why, and that it is not its fault."""
    detail = ""
    if reason:
        reason = reason.partition(" is not ready: ")[2] or reason  # the why, not the who again
        detail = f" {reason}."
    return ModelNotReady(f"Model with name {name} is not ready.{detail}")


# -- which model -------------------------------------------------------------------------------


def _target(plane: DataPlane, model: str) -> str:
    """The model a path's name reaches: the one served when there is one (Truss ignores the
    name), else the one named."""
    sole = plane.sole_model()
    return model if sole is None else sole


def _resolve(plane: DataPlane, name: str) -> ModelVersion:
    try:
        return plane.resolve(name)
    except ModelNotReady as exc:
        raise _not_ready(name, exc.message) from None


def defining(plane: DataPlane, method: str) -> list[str]:
    """The models whose default version defines ``method`` (its ``capabilities.endpoints``)."""
    names = []
    for mv in plane.versions():
        caps = getattr(mv.instance, "capabilities", None)
        if caps is not None and method in caps.endpoints and mv.name not in names:
            names.append(mv.name)
    return names


# -- health ------------------------------------------------------------------------------------


async def live(self: HttpApp, ex: Exchange, send: Send) -> None:
    """Truss's liveness: ``true`` while the process answers."""
    await send_body(send, 200, JSON, _TRUE)


async def ready(self: HttpApp, ex: Exchange, send: Send, model: str, healthy: bool = True) -> None:
    """Truss's readiness: ``{}``, or 503 when the model is not ready or (``healthy``: asked)
    says it is unhealthy."""
    ex.errors = send_truss_error
    plane = self.dataplane
    name = _target(plane, model)
    if not (await plane.model_healthy(name) if healthy else plane.model_ready(name)):
        raise _not_ready(name)
    await send_body(send, 200, JSON, _EMPTY_OBJECT)


async def loaded(self: HttpApp, ex: Exchange, send: Send, model: str) -> None:
    """Truss's ``/loaded``, and its ``/ping`` on a server of one truss (SageMaker's probe):
    ``{}`` once loaded, else its not-ready error (503); the model's health is not asked, as in
    Truss."""
    await ready(self, ex, send, model, healthy=False)


async def schema(self: HttpApp, ex: Exchange, send: Send, model: str) -> None:
    """The model's input and output schema as Truss's ``/schema`` answers it."""
    ex.errors = send_truss_error
    name = _target(self.dataplane, model)
    if not self.dataplane.model_ready(name):
        raise ModelStatus("Schema not available, please try again later.", 503)
    found = self.dataplane.resolve(name).instance.capabilities.io_schema
    if found is None:
        raise ModelStatus("No schema found", 404)
    await send_body(send, 200, JSON, _responses.encoder.encode(found))


# -- predict -----------------------------------------------------------------------------------


def _is_binary(content_type: bytes | None) -> bool:
    """Whether the request's content type (its header) is MessagePack's, Truss's binary."""
    if content_type is None:
        return False
    return content_type.partition(b";")[0].strip().lower() == b"application/octet-stream"


def _parser(binary: bool, schema: bool = False) -> Callable[[bytes], Any]:
    if binary:
        return _truss_wire.decode_msgpack
    return _truss_wire.decode_json_for_schema if schema else _truss_wire.decode_json


async def predict(self: HttpApp, ex: Exchange, send: Send, model: str) -> None:
    """``:predict`` / ``:predict_binary``: preprocess, predict, postprocess on the model."""
    ex.errors = send_truss_error
    name = _target(self.dataplane, model)
    try:
        mv, call, content_type = self._start(ex, name, None, _TRUSS, b"content-type")
    except ModelNotReady as exc:
        raise _not_ready(name, exc.message) from None
    binary = _is_binary(content_type)
    caps = mv.instance.capabilities
    await self._read(ex, mv, call, _parser(binary, caps.input_kind is _SCHEMA))
    if caps.streaming or caps.returns_streams:
        await _answer_items(self, ex, send, mv, self.dataplane.stream(call, mv), binary)
        return
    answer = await self.dataplane.infer(call, mv, ex.task)
    if mv.config.sequence_batching:
        send = self._sender(answer, send)
    await _answer_value(ex, send, answer.value, binary, answer.headers)


async def invocations(self: HttpApp, ex: Exchange, send: Send) -> None:
    """SageMaker's ``POST /invocations``: predict on the one model served."""
    ex.errors = send_truss_error
    sole = self.dataplane.sole_model()
    if sole is None:
        raise NotFound(
            "POST /invocations reaches the one model of a server that serves exactly one; "
            "this one serves several: use POST /v1/models/{model}:predict"
        )
    await predict(self, ex, send, sole)


async def endpoint(self: HttpApp, ex: Exchange, send: Send, method: str) -> None:
    """An OpenAI-style route: the model method ``method`` of the model that defines it (the
    one named by the body's ``"model"`` where several do).

    Podium's own OpenAI API answers these paths for the other models (``server/openai/_routes``
    has the one rule that decides); where neither answers, a 404, as Truss answers a model
    without the method."""
    ex.errors = send_truss_error
    plane = self.dataplane
    binary = _is_binary(ex.check_length(b"content-type"))
    body = await ex.body()
    payload = _parser(binary)(body)
    names = defining(plane, method)
    if len(names) != 1:
        asked = payload.get("model") if isinstance(payload, dict) else None
        if not names:
            raise NotFound(f"`{method}` must only be called if model has it.")
        if asked not in names:
            raise NotFound(
                f"several models define `{method}` ({', '.join(names)}): name one in the "
                'body\'s "model" field'
            )
        names = [asked]
    mv = _resolve(plane, names[0])
    call = Call(mv.name, None, WireProtocol.TRUSS, payload, ex.request())
    ex.watch()
    await _answer_items(self, ex, send, mv, plane.endpoint(call, mv, method), binary)


# -- answers -----------------------------------------------------------------------------------


def _with_error_headers(send: Send) -> Send:
    """``send``, adding Truss's error headers (code 700) to a response of status 300 or more."""

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start" and message["status"] >= 300:
            names = {_SOURCE[0], _CODE}
            headers = [h for h in message.get("headers", ()) if h[0].lower() not in names]
            message = {**message, "headers": [*headers, *error_headers(_CLIENT)]}
        await send(message)

    return sending


def _answer_value(
    ex: Exchange, send: Send, value: Any, binary: bool, extra: Headers | None
) -> Awaitable[None]:
    """One whole answer: a ``Response`` as it is, a ``Reply`` as its handler set it, else
    Truss's JSON (or MessagePack, when the request was). What sends it, to be awaited (not a
    coroutine of its own: one level fewer per answer)."""
    if is_response(value):
        if value.status_code >= 300:
            send = _with_error_headers(send)
        return value(ex.scope, ex.app_receive, send)
    if isinstance(value, Reply):
        return _responses.send_reply(send, value)
    if binary:
        body = value if isinstance(value, bytes) else _truss_wire.encode_msgpack(value)
        return send_body(send, 200, OCTETS, body, extra)
    return send_body(send, 200, JSON, _truss_wire.encode_json(value), extra)


def _gathers(ex: Exchange) -> bool:
    """Truss's rule: a stream is answered whole to ``accept: application/json``, except to
    OpenAI's SDK, which sends it and streams."""
    if ex.header(b"accept") != b"application/json":
        return False
    agent = ex.header(b"user-agent") or b""
    return b"openai" not in agent.lower()


def _gathered(items: list[Any]) -> str:
    data = b"".join(chunk_of(item) for item in items)
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        raise BadModelOutput(f"Unhandled exception: UnicodeDecodeError: {exc}") from None


async def _answer_items(
    self: HttpApp, ex: Exchange, send: Send, mv: ModelVersion, items: AnswerStream, binary: bool
) -> None:
    """The answer of a call that may stream: a :class:`Returned` value whole, a gathered
    stream as one JSON string, or the items as chunks (the first one's errors still have
    their status; later ones end the stream)."""
    if mv.config.sequence_batching:
        send = self._sender(items, send)
    try:
        first = await anext(items, _responses.NOTHING)
        if type(first) is Returned:
            await _answer_value(ex, send, first.value, binary, [])
            return
        if _gathers(ex):
            gathered = [] if first is _responses.NOTHING else [first]
            gathered.extend([item async for item in items])
            await _answer_value(ex, send, _gathered(gathered), binary, [])
            return

        def failed(exc: Exception) -> None:  # Truss logs it and ends the stream
            logger.warning("stream of model '%s' failed: %s", mv.name, exc)

        await _responses.send_stream(send, first, items, OCTETS, chunk_of, failed)
    finally:
        await items.aclose()


# -- WebSockets --------------------------------------------------------------------------------


def _websocket_model(plane: DataPlane, path: str) -> str | None:
    """The model a WebSocket path reaches: ``/v1/websocket`` the one model that serves
    WebSockets (or the one model served), ``/v1/models/{m}/websocket`` ``m`` (any name the
    one model served); None for any other path."""
    if path == "/v1/websocket":
        serving = [
            mv.name
            for mv in plane.versions()
            if getattr(getattr(mv.instance, "capabilities", None), "websocket", False)
        ]
        if len(set(serving)) == 1:
            return serving[0]
        return plane.sole_model() or ""
    return _target(plane, path.split("/")[3]) if is_websocket_path(path) else None


def is_websocket_path(path: str) -> bool:
    """Whether a WebSocket to ``path`` is Truss's (:func:`serve_websocket` serves it)."""
    parts = path.split("/")
    return path == "/v1/websocket" or (
        len(parts) == 5
        and parts[:3] == ["", "v1", "models"]
        and bool(parts[3])
        and parts[4] == "websocket"
    )


async def _close(websocket: Any, code: int, reason: str | None = None) -> None:
    try:
        await websocket.close(code=code, reason=reason)
    except (RuntimeError, OSError):  # closed already (by the model), or the client left
        pass


async def serve_websocket(plane: DataPlane, scope: Scope, receive: Receive, send: Send) -> None:
    """A WebSocket on one of Truss's paths, accepted and handed to the model that serves it
    (``DataPlane.websocket``), as Truss's server does: where no model serves it, accepted and
    closed with 1003 "WebSocket is not implemented on this deployment."; a model that raises
    closes it with 1011 "Internal Server Error (in model/chainlet)."; one that returns, 1000."""
    from starlette.websockets import WebSocket, WebSocketDisconnect

    websocket = WebSocket(scope, receive, send)
    name = _websocket_model(plane, scope["path"]) or ""
    try:
        mv = _resolve(plane, name)
    except NotFound:
        mv = None
    except PodiumError as exc:  # not ready: refused before the handshake, as Truss refuses it
        if "websocket.http.response" in scope.get("extensions", {}):

            async def deny(message: Message) -> None:  # Truss's HTTP error, as the denial
                await send({**message, "type": "websocket." + message["type"]})

            await send_truss_error(deny, exc)
        else:  # a server without the denial response: accepted, then 1013 (try again later)
            await _accept_and_close(websocket, 1013, exc.message)
        return
    if mv is None or not mv.instance.capabilities.websocket:
        logger.warning("WebSocket to %s: %s", scope["path"], WEBSOCKET_NOT_SERVED_REASON)
        await _accept_and_close(websocket, WEBSOCKET_NOT_SERVED, WEBSOCKET_NOT_SERVED_REASON)
        return
    call = Call(mv.name, None, WireProtocol.TRUSS, None, websocket)
    try:
        await websocket.accept()  # Truss's models get it accepted
        await plane.websocket(call, mv, websocket)
    except WebSocketDisconnect as exc:
        logger.info("model '%s': the client closed its WebSocket (%s)", mv.name, exc.code)
    except Exception as exc:
        logger.warning("model '%s': its WebSocket failed: %s", mv.name, exc)
        await _close(websocket, WEBSOCKET_MODEL_ERROR, MODEL_ERROR_MESSAGE)
    else:
        await _close(websocket, 1000)


async def _accept_and_close(websocket: Any, code: int, reason: str) -> None:
    from starlette.websockets import WebSocketDisconnect

    try:
        await websocket.accept()
        await websocket.close(code=code, reason=reason)
    except (WebSocketDisconnect, RuntimeError, OSError):
        pass
