"""OIP's ``generate`` / ``generate_stream`` (Triton's generate extension) on a generating
OpenAI model: the same model serves both worlds (docs/openai.md, "OIP generate").

The body is Triton's generate form: ``text_input`` (the prompt, a string) and the sampling
fields, at the top level or under ``parameters`` (or ``sampling_parameters``, as Triton's vLLM
backend takes them): ``max_tokens``, ``temperature``, ``top_p``, ``top_k``, ``seed``, ``stop``,
``ignore_eos``. The prompt is tokenized as ``/v1/completions`` tokenizes it, and generated as one
choice. ``generate`` answers ``{"model_name", "model_version", "text_output"}`` with the whole
text; ``generate_stream`` sends one such event per piece of text (Server-Sent Events). Errors are
OIP's (``{"error": ...}``), as on every ``/v2`` route.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from ...errors import InvalidInput, PodiumError
from .._asgi import Send
from ..http._exchange import Exchange
from ..http._responses import JSON, SSE, send_body, sse_event
from ._contract import Sampling
from ._generate import Choice, first_then, pieces, record
from ._serving import face_of, target, token_limit

if TYPE_CHECKING:
    from ...dataplane import DataPlane, ModelVersion

__all__ = ["generates", "serve"]

_FIELDS: dict[str, Any] = {
    "max_tokens": int,
    "temperature": (int, float),
    "top_p": (int, float),
    "top_k": int,
    "seed": int,
    "ignore_eos": bool,
}


def generates(mv: ModelVersion) -> bool:
    """Whether ``mv`` is a generating OpenAI model (its generate routes are served here)."""
    face = face_of(mv)
    return face is not None and face.generates


def _fields(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise InvalidInput("generate body must be a JSON object")
    fields = {k: v for k, v in body.items() if k not in ("parameters", "sampling_parameters")}
    for key in ("parameters", "sampling_parameters"):
        extra = body.get(key) or {}
        if not isinstance(extra, dict):
            raise InvalidInput(f"generate field '{key}' must be an object")
        fields.update(extra)
    text = fields.get("text_input")
    if not isinstance(text, str) or not text:
        raise InvalidInput("generate needs 'text_input', a non-empty string (the prompt)")
    for name, kinds in _FIELDS.items():
        value = fields.get(name)
        if value is not None and (
            (type(value) is bool) != (kinds is bool) or not isinstance(value, kinds)
        ):
            raise InvalidInput(f"generate field '{name}' has the wrong type")
    if fields.get("max_tokens") is not None and fields["max_tokens"] < 1:
        raise InvalidInput("generate field 'max_tokens' must be at least 1")
    stop = fields.get("stop")
    if stop is not None and not (
        isinstance(stop, str) or (isinstance(stop, list) and all(isinstance(s, str) for s in stop))
    ):
        raise InvalidInput("generate field 'stop' must be a string or a list of strings")
    return fields


async def serve(plane: DataPlane, ex: Exchange, send: Send, mv: ModelVersion, action: str) -> None:
    try:
        body = msgspec.json.decode(await ex.body())
    except msgspec.DecodeError as exc:
        raise InvalidInput(f"generate body is not valid JSON: {exc}") from None
    fields = _fields(body)
    t = target(plane, mv.name if mv.version is None else f"{mv.name}@{mv.version}", "generates")
    t.mv = mv
    assert t.codec is not None
    prompt = t.codec.encode(fields["text_input"])
    try:
        limit = token_limit(t, len(prompt), fields.get("max_tokens"), "max_tokens", "text_input")
    except PodiumError as exc:
        raise InvalidInput(exc.message) from None
    temperature = fields.get("temperature")
    sampling = Sampling(
        prompt_token_ids=prompt,
        max_tokens=limit,
        temperature=1.0 if temperature is None else float(temperature),
        top_p=float(fields.get("top_p") or 1.0),
        top_k=fields.get("top_k") or 0,
        seed=fields.get("seed"),
        ignore_eos=bool(fields.get("ignore_eos")),
    )
    stop = fields.get("stop")
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    choice = Choice(sampling, t.codec, stops, mv.name)
    head = {"model_name": mv.name, "model_version": mv.version or ""}
    ex.watch()
    gen = pieces(plane, mv, [choice])
    try:
        if action == "generate":
            text = "".join([piece.text async for piece in gen])
            await send_body(send, 200, JSON, msgspec.json.encode({**head, "text_output": text}))
            return
        _, every = await first_then(gen)
        await send({"type": "http.response.start", "status": 200, "headers": SSE})
        try:
            async for piece in every:
                if piece.text:
                    event = sse_event({**head, "text_output": piece.text})
                    await send({"type": "http.response.body", "body": event, "more_body": True})
        except PodiumError as exc:  # after the stream began: an error event, as OIP streams do
            event = sse_event({"error": exc.message})
            await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    finally:
        await gen.aclose()
        record(mv, len(prompt), [choice])
