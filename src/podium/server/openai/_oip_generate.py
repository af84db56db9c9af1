"""OIP's ``generate`` / ``generate_stream`` (Triton's generate extension) on a generating
OpenAI model: the same model serves both worlds (docs/openai.md, "OIP generate").

The body is Triton's generate form: ``text_input`` (the prompt, a string) and the sampling
fields, at the top level or under ``parameters`` (or ``sampling_parameters``, as Triton's vLLM
backend takes them): ``max_tokens``, ``temperature``, ``top_p``, ``top_k``, ``seed``, ``stop``,
``ignore_eos``. They make a ``/v1/completions`` request of one choice (checked as that route
checks it), without its default ``max_tokens``: the completion may fill the model's context.
``generate`` answers ``{"model_name", "model_version", "text_output"}`` with the whole text;
``generate_stream`` sends one such event per piece of text (Server-Sent Events). Errors are
OIP's (``{"error": ...}``), as on every ``/v2`` route.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

from ...errors import InvalidInput
from .._asgi import Send
from ..http import _oip
from ..http._exchange import Exchange
from ..http._responses import send_json, sse_event
from . import _serving_completion
from ._errors import send_events
from ._serving import face_of

if TYPE_CHECKING:
    from ...dataplane import DataPlane, ModelVersion

__all__ = ["generates", "serve"]

#: The sampling fields Triton's generate form may carry (the rest of the body is not read).
_FIELDS = ("max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "ignore_eos")


def generates(mv: ModelVersion) -> bool:
    """Whether ``mv`` is a generating OpenAI model (its generate routes are served here)."""
    face = face_of(mv)
    return face is not None and face.generates


def _request(body: Any, mv: ModelVersion) -> dict[str, Any]:
    """The completions request the generate body asks for."""
    if not isinstance(body, dict):
        raise InvalidInput("generate body must be a JSON object")
    fields = dict(body)
    for key in ("parameters", "sampling_parameters"):
        extra = body.get(key) or {}
        if not isinstance(extra, dict):
            raise InvalidInput(f"generate field '{key}' must be an object")
        fields.update(extra)
    text = fields.get("text_input")
    if not isinstance(text, str) or not text:
        raise InvalidInput("generate needs 'text_input', a non-empty string (the prompt)")
    model = mv.name if mv.version is None else f"{mv.name}@{mv.version}"
    given = {key: fields[key] for key in _FIELDS if fields.get(key) is not None}
    if given.get("max_tokens") == 0:  # generate generates (completions' 0 only scores a prompt)
        raise InvalidInput("generate field 'max_tokens' must be at least 1")
    return {"model": model, "prompt": text, "max_tokens": None, **given}


async def serve(plane: DataPlane, ex: Exchange, send: Send, mv: ModelVersion, action: str) -> None:
    body = _oip.decode_json(await ex.body())  # as every OIP route reads JSON
    job = _serving_completion.prepare(plane, _request(body, mv))
    head = {"model_name": mv.name, "model_version": mv.version or ""}
    ex.watch()
    if action == "generate":
        answer = await _serving_completion.answer(plane, job)
        await send_json(send, 200, {**head, "text_output": answer["choices"][0]["text"]})
        return

    async def texts() -> AsyncGenerator[dict[str, Any], None]:
        chunks = _serving_completion.stream(plane, job)
        try:
            async for chunk in chunks:
                if chunk["choices"][0]["text"]:
                    yield {**head, "text_output": chunk["choices"][0]["text"]}
        finally:
            await chunks.aclose()

    # After the stream began an error is an event, as OIP streams say it
    await send_events(send, texts(), lambda exc: sse_event({"error": exc.message}))
