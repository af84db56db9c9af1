"""Chat and text completions answered by the model's own ``chat`` / ``complete`` (the simple
contract, docs/openai.md): the model gets the validated request and returns the text, or yields
it piece by piece; Podium applies ``stop`` strings, counts usage with the model's tokenizer where
it sets one (else 0), and writes OpenAI's objects, whole or streamed, as for a generating model
(the same answers of ``_serving_chat`` / ``_serving_completion``, from the pieces of that text).
One choice per request (``n`` > 1 is a 400: the model decides its text itself)."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

import msgspec

from ...types import Call, MethodInputs, WireProtocol
from ._contract import Sampling
from ._generate import Choice, Job, Piece
from ._protocol import ChatCompletionRequest, CompletionRequest, OpenAIInvalid, decode
from ._serving import Target
from ._serving_chat import ChatJob
from ._serving_completion import CompletionJob
from ._tokens import StopText

if TYPE_CHECKING:
    from ...dataplane import DataPlane

__all__ = ["prepare"]


class _Written(Choice):
    """The one choice of a model that writes its own text: what the answers read of it (its
    tokens, counted with the model's tokenizer, and its ``finish_reason``, ``stop``)."""

    def __init__(self) -> None:  # no tokens to decode: none of Choice's own state is needed
        self.sampling = Sampling([], max_tokens=0)
        self.count = 0
        self.finish_reason = None


class _Own(Job):
    """A request the model's own method answers: one choice, the pieces of the text it returns.
    The answers see ``request`` without ``logprobs`` or ``echo`` (the model writes text, not
    tokens: no token is known to show)."""

    prefix: str

    def __init__(self, t: Target, call: Call, request: Any, prompt_tokens: int) -> None:
        Job.__init__(self, request, t, self.prefix, prompt_tokens)
        self.call = call
        self.choices = [_Written()]
        self.tools: set[str] = set()  # the model's text is its content, not read for tool calls
        self.named: str | None = None
        self.prompt_of: dict[int, list[int]] = {0: []}

    async def pieces(self, plane: DataPlane) -> AsyncGenerator[Piece, None]:
        value = (await plane.infer(self.call, self.target.mv)).value
        stops = StopText(self.request.stop)
        items = value if not isinstance(value, str) else _one(value)
        try:
            async for item in items:
                text = stops.add(str(item))
                if text:
                    yield Piece(0, text)
                if stops.stopped:
                    break
        finally:
            close = getattr(items, "aclose", None)
            if close is not None:
                await close()
        choice = self.choices[0]
        choice.finish_reason = "stop"
        choice.count = _count(self.target, stops.text)
        yield Piece(0, stops.flush(), finish_reason="stop")


class _OwnChat(_Own, ChatJob):
    prefix = "chatcmpl"


class _OwnCompletion(_Own, CompletionJob):
    prefix = "cmpl"


async def _one(text: str) -> AsyncGenerator[str, None]:
    yield text


def _count(t: Target, text: str) -> int:
    return len(t.codec.encode(text)) if t.codec is not None and text else 0


def prepare(t: Target, body: bytes, kind: str) -> ChatJob | CompletionJob:
    """The request for the model's own ``chat`` (``kind`` ``chat_completions``) or ``complete``
    decoded and checked; 400 otherwise."""
    method = "chat" if kind == "chat_completions" else "complete"
    asked: type[ChatCompletionRequest | CompletionRequest]
    asked = ChatCompletionRequest if method == "chat" else CompletionRequest
    request = decode(body, asked)
    if request.n != 1:
        raise OpenAIInvalid(
            f"model '{t.mv.name}' writes its own {method} text: one choice per request", "n"
        )
    call = Call(t.mv.name, t.mv.version, WireProtocol.OPENAI, MethodInputs(method, request), None)
    if isinstance(request, CompletionRequest):
        if not isinstance(request.prompt, str):
            raise OpenAIInvalid(f"model '{t.mv.name}' takes one prompt, a string", "prompt")
        shown = msgspec.structs.replace(request, logprobs=None, echo=False)
        return _OwnCompletion(t, call, shown, _count(t, request.prompt))
    texts = [m.content for m in request.messages if isinstance(m.content, str)]
    shown_chat = msgspec.structs.replace(request, logprobs=False, top_logprobs=None)
    return _OwnChat(t, call, shown_chat, sum(_count(t, text) for text in texts))
