"""Chat and text completions answered by the model's own ``chat`` / ``complete`` (the simple
contract, docs/openai.md): the model gets the validated request and returns the text, or yields
it piece by piece; Podium applies ``stop`` strings, counts usage with the model's tokenizer where
it sets one (else 0), and writes OpenAI's objects, whole or streamed. One choice per request
(``n`` > 1 is a 400: the model decides its text itself)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from typing import TYPE_CHECKING, Any

from ...types import Call, MethodInputs, WireProtocol
from ._protocol import ChatCompletionRequest, CompletionRequest, OpenAIInvalid, decode
from ._serving import Target, created, new_id, usage
from ._tokens import StopText

if TYPE_CHECKING:
    from ...dataplane import DataPlane

__all__ = ["answer"]

_KINDS: dict[str, tuple[str, type[Any], str, str]] = {
    "chat_completions": ("chat", ChatCompletionRequest, "chatcmpl", "chat.completion"),
    "completions": ("complete", CompletionRequest, "cmpl", "text_completion"),
}


def _count(t: Target, text: str) -> int:
    return len(t.codec.encode(text)) if t.codec is not None and text else 0


async def _pieces(value: Any) -> AsyncGenerator[str, None]:
    if isinstance(value, str):
        yield value
        return
    items: AsyncIterator[Any] = value
    try:
        async for item in items:
            yield str(item)
    finally:
        close = getattr(items, "aclose", None)
        if close is not None:
            await close()


async def answer(
    plane: DataPlane, t: Target, body: bytes, kind: str, watch: Any
) -> tuple[bool, Any]:
    """``(stream, value)``: the whole object, or an async generator of the stream's chunks."""
    method, struct, prefix, obj = _KINDS[kind]
    request = decode(body, struct)
    if request.n != 1:
        raise OpenAIInvalid(
            f"model '{t.mv.name}' writes its own {method} text: one choice per request", "n"
        )
    if isinstance(request, CompletionRequest):
        if not isinstance(request.prompt, str):
            raise OpenAIInvalid(f"model '{t.mv.name}' takes one prompt, a string", "prompt")
        prompt_tokens = _count(t, request.prompt)
    else:
        prompt_tokens = 0
        if t.codec is not None:
            texts = [m.content for m in request.messages if isinstance(m.content, str)]
            prompt_tokens = sum(_count(t, text) for text in texts)
    stop = request.stop
    stops = StopText([stop] if isinstance(stop, str) else list(stop or []))
    call = Call(t.mv.name, t.mv.version, WireProtocol.OPENAI, MethodInputs(method, request), None)
    watch()
    value = (await plane.infer(call, t.mv)).value
    head = {"id": new_id(prefix), "object": obj, "created": created(), "model": request.model}
    chat = method == "chat"
    if not request.stream:
        text = ""
        gen = _pieces(value)
        async for piece in gen:
            text += stops.add(piece)
            if stops.stopped:
                break
        await gen.aclose()
        text += stops.flush()
        tokens = usage(prompt_tokens, _count(t, text))
        if chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}}
        else:
            choice = {"index": 0, "text": text}
        choice |= {"logprobs": None, "finish_reason": "stop"}
        return False, {**head, "choices": [choice], "usage": tokens}
    return True, _stream(value, head, chat, stops, request, t, prompt_tokens)


async def _stream(
    value: Any,
    head: dict[str, Any],
    chat: bool,
    stops: StopText,
    request: Any,
    t: Target,
    prompt: int,
) -> AsyncGenerator[dict[str, Any], None]:
    head = {**head, "object": "chat.completion.chunk" if chat else "text_completion"}

    def chunk(text: str, reason: str | None = None, role: bool = False) -> dict[str, Any]:
        if chat:
            delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {}
            if text:
                delta["content"] = text
            choice = {"index": 0, "delta": delta}
        else:
            choice = {"index": 0, "text": text}
        choice |= {"logprobs": None, "finish_reason": reason}
        return {**head, "choices": [choice]}

    if chat:
        yield chunk("", role=True)
    gen = _pieces(value)
    try:
        async for piece in gen:
            text = stops.add(piece)
            if text:
                yield chunk(text)
            if stops.stopped:
                break
    finally:
        await gen.aclose()
    yield chunk(stops.flush(), "stop")
    options = request.stream_options
    if options is not None and options.include_usage:
        yield {**head, "choices": [], "usage": usage(prompt, _count(t, stops.text))}
