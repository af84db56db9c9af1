"""OpenAI's routes, handlers of :class:`~podium.server.http.HttpApp` in its one route table
(``INFERENCE_ROUTES``, ``server/http/_app.py``).

- ``GET /v1/models``: the ready models that serve OpenAI's API;
- ``GET /v1/models/{model}``: that model, OpenAI's ``model`` object;
- ``POST /v1/chat/completions``, ``/v1/completions``, ``/v1/embeddings``.

**One rule decides who answers** the paths Truss's server shares: a route is Truss's (Truss's
behaviour, ``_truss.py``) where the model the request names defines the Truss method of that
path (``chat_completions``, ``completions``, ``embeddings``), or where no model serves OpenAI's
API, nor may once loaded (a server of trusses: there the name is ignored, as Truss's server
ignores it, and a method no model defines is Truss's 404). Everything else is Podium's OpenAI
API (an unknown model: 404 in OpenAI's shape; one still loading: 503). So too
``GET /v1/models/{model}``: OpenAI's model object for a model that serves OpenAI's API, Truss's
readiness (``{}``) for any other model (an unknown one: OpenAI's 404 where some model serves
OpenAI's API, else Truss's).

Streams are Server-Sent Events: ``data: {chunk}`` events and ``data: [DONE]``. The response
starts only once the model has produced its first piece, so a request refused by the model's
queue (or failing at once) still gets its status; an error after that is an event
``data: {"error": ...}`` and then ``[DONE]``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from ...errors import NotFound, PodiumError
from ...types import ModelState
from .._asgi import Send
from ..http import _truss
from ..http._exchange import Exchange
from ..http._responses import send_body, send_json
from ..http._routing import Api, Route
from . import _serving_chat, _serving_completion, _serving_embedding, _serving_methods
from ._errors import DONE, PATHS, error_event, is_openai_path, send_events, send_openai_error
from ._oip_generate import generates
from ._oip_generate import serve as serve_generate
from ._serving import Target, face_of, resolve, serves, split, target

if TYPE_CHECKING:
    from ...dataplane import DataPlane, ModelVersion
    from ..http._app import HttpApp

__all__ = [
    "PATHS",
    "ROUTES",
    "chat_completions",
    "completions",
    "embeddings",
    "generates",
    "is_openai_path",
    "model",
    "models",
    "send_openai_error",
    "serve_generate",
]


class _Named(msgspec.Struct):
    model: Any = None


def _named(body: bytes) -> str | None:
    """The body's ``model`` where it is a JSON object naming one (the rest is not looked at)."""
    try:
        value = msgspec.json.decode(body, type=_Named).model
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return value if isinstance(value, str) else None


def _found(plane: DataPlane, name: str | None) -> ModelVersion | None:
    """The ready version ``name`` names, or None (none named, or none ready)."""
    try:
        return None if name is None else resolve(plane, name)
    except PodiumError:
        return None


def _may_serve(mv: ModelVersion) -> bool:
    """Whether ``mv`` serves OpenAI's API, or may once it has loaded."""
    if serves(mv):
        return True
    return mv.state is not ModelState.READY and getattr(mv.instance, "may_serve_openai", False)


def _truss_answers(plane: DataPlane, method: str, body: bytes) -> bool:
    """The rule (see the module's docstring)."""
    if _named(body) in _truss.defining(plane, method):
        return True
    return not any(_may_serve(mv) for mv in plane.versions())


async def _read(ex: Exchange) -> bytes:
    ex.errors = send_openai_error
    ex.check_length()
    return await ex.body()


async def _generate(self: HttpApp, ex: Exchange, send: Send, method: str, serving: Any) -> None:
    """Chat or text completions (``serving``: their module), or Truss's method by the rule."""
    body = await _read(ex)
    plane = self.dataplane
    if _truss_answers(plane, method, body):
        await _truss.endpoint(self, ex, send, method)
        return
    own = _own_method(plane, body, method)
    if own is not None:  # the model's own chat / complete (_serving_methods)
        job = _serving_methods.prepare(own, body, method)
    else:
        job = serving.prepare(plane, body)
    ex.watch()
    if job.request.stream:
        await send_events(send, serving.stream(plane, job), error_event, DONE)
    else:
        await send_json(send, 200, await serving.answer(plane, job))


def _own_method(plane: DataPlane, body: bytes, method: str) -> Target | None:
    """The model the body names where it answers ``method`` with its own chat / complete (and
    does not generate with Podium)."""
    name = _named(body)
    mv = _found(plane, name)
    face = None if mv is None else face_of(mv)
    own = "chat" if method == "chat_completions" else "complete"
    if name is None or face is None or face.generates or own not in face.methods:
        return None
    return target(plane, name, "methods")


async def chat_completions(self: HttpApp, ex: Exchange, send: Send) -> None:
    await _generate(self, ex, send, "chat_completions", _serving_chat)


async def completions(self: HttpApp, ex: Exchange, send: Send) -> None:
    await _generate(self, ex, send, "completions", _serving_completion)


async def embeddings(self: HttpApp, ex: Exchange, send: Send) -> None:
    body = await _read(ex)
    plane = self.dataplane
    if _truss_answers(plane, "embeddings", body):
        await _truss.endpoint(self, ex, send, "embeddings")
        return
    ex.watch()
    await send_json(send, 200, await _serving_embedding.embeddings(plane, body))


def _model_object(mv: ModelVersion) -> dict[str, Any]:
    return {
        "id": mv.name,
        "object": "model",
        "created": 0,
        "owned_by": "podium",
        "root": mv.name,
        "parent": None,
        "max_model_len": getattr(face_of(mv), "context_length", None),
    }


def _served(plane: DataPlane) -> list[ModelVersion]:
    """The default, ready version of each model that serves OpenAI's API."""
    names = dict.fromkeys(mv.name for mv in plane.versions())
    return [mv for name in names if (mv := _found(plane, name)) is not None and serves(mv)]


async def health(self: HttpApp, ex: Exchange, send: Send) -> None:
    """vLLM's ``/health``, which OpenAI load tools (guidellm) poll before they start: 200 with
    no body once every model that should serve does (the server's readiness), else 503."""
    await send_body(send, 200 if self.dataplane.ready() else 503, [], b"")


async def models(self: HttpApp, ex: Exchange, send: Send) -> None:
    ex.errors = send_openai_error
    data = [_model_object(mv) for mv in _served(self.dataplane)]
    await send_json(send, 200, {"object": "list", "data": data})


async def model(self: HttpApp, ex: Exchange, send: Send, model: str) -> None:
    """OpenAI's model object for a model that serves OpenAI's API, else Truss's readiness."""
    plane = self.dataplane
    ex.errors = send_openai_error
    mv = _found(plane, model)
    if mv is None or not serves(mv):
        known = {mv.name for mv in plane.versions()}
        if split(plane, model)[0] not in known and _served(plane):
            raise NotFound(f"The model '{model}' does not exist")
        await _truss.ready(self, ex, send, model)
        return
    await send_json(send, 200, _model_object(mv))


#: OpenAI's routes, in ``INFERENCE_ROUTES``.
ROUTES = [
    Route("GET", "/health", health, Api.OPENAI, "openaiHealth"),
    Route("GET", "/v1/models", models, Api.OPENAI, "openaiModels"),
    Route("POST", "/v1/chat/completions", chat_completions, Api.OPENAI, "chatCompletions"),
    Route("POST", "/v1/completions", completions, Api.OPENAI, "completions"),
    Route("POST", "/v1/embeddings", embeddings, Api.OPENAI, "embeddings"),
]
