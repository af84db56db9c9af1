"""``POST /v1/chat/completions`` on a generating model (docs/openai.md, "Chat").

The messages are rendered by the model's chat template (with the request's ``tools``) into one
prompt; each of the ``n`` choices generates from it. A whole answer is one ``chat.completion``;
a stream is ``chat.completion.chunk`` events: first one per choice carrying the role, then the
content as it comes (choices interleaved, each with its ``index``), ``finish_reason`` only in a
choice's last chunk, then a usage chunk (``stream_options.include_usage``) and ``[DONE]``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from ._contract import Token
from ._generate import Choice, Job, Piece, started
from ._protocol import (
    AssistantMessage,
    ChatCompletionRequest,
    DeveloperMessage,
    ImagePart,
    NamedToolChoice,
    OpenAIInvalid,
    SystemMessage,
    ToolMessage,
    decode,
)
from ._serving import Target, check_choices, samplings, target, token_limit
from ._tokens import TextCodec
from ._tools import could_be_call, parse_tool_calls

if TYPE_CHECKING:
    from ...dataplane import DataPlane

__all__ = ["ChatJob", "answer", "prepare", "stream"]


class ChatJob(Job):
    """One chat request, checked and tokenized, with its choices."""

    def __init__(self, request: ChatCompletionRequest, t: Target, prompt: list[int]) -> None:
        super().__init__(request, t, "chatcmpl", len(prompt))
        asked = request.token_limit()
        param = "max_completion_tokens" if request.max_completion_tokens else "max_tokens"
        limit = token_limit(t, len(prompt), asked, param, "messages")
        logprobs = (request.top_logprobs or 0) if request.logprobs else None
        self.choices = [
            Choice(s, self.codec, request.stop, t.mv.name)
            for s in samplings(request, prompt, limit, 0, logprobs=logprobs)
        ]
        choice = request.tool_choice
        self.tools: set[str] = set()
        if request.tools and choice != "none":
            self.tools = {tool.function.name for tool in request.tools}
        self.named = choice.function.name if isinstance(choice, NamedToolChoice) else None


def _text(content: Any, where: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    parts = []
    for i, part in enumerate(content):
        if isinstance(part, ImagePart):
            raise OpenAIInvalid(
                "this model takes text only; an image_url part cannot be served",
                f"{where}.content[{i}]",
            )
        parts.append(part.text)
    return "\n".join(parts)


def _messages(request: ChatCompletionRequest) -> list[dict[str, Any]]:
    """The messages as chat templates take them (``developer`` is ``system`` to a template)."""
    out: list[dict[str, Any]] = []
    for i, message in enumerate(request.messages):
        where = f"messages[{i}]"
        if isinstance(message, SystemMessage | DeveloperMessage):
            out.append({"role": "system", "content": _text(message.content, where)})
        elif isinstance(message, AssistantMessage):
            item: dict[str, Any] = {"role": "assistant", "content": _text(message.content, where)}
            if message.tool_calls:
                item["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {
                            "name": call.function.name,
                            "arguments": _arguments(call.function.arguments),
                        },
                    }
                    for call in message.tool_calls
                ]
            out.append(item)
        elif isinstance(message, ToolMessage):
            out.append(
                {
                    "role": "tool",
                    "content": _text(message.content, where),
                    "tool_call_id": message.tool_call_id,
                }
            )
        else:
            out.append({"role": "user", "content": _text(message.content, where)})
    return out


def _arguments(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def prepare(plane: DataPlane, body: bytes) -> ChatJob:
    """The request decoded, checked against the model, and tokenized; 400/404 otherwise."""
    request = decode(body, ChatCompletionRequest)
    check_choices(request.n)
    t = target(plane, request.model, "generates")
    assert t.codec is not None
    tools = None
    if request.tools:
        tools = [msgspec.to_builtins(tool) for tool in request.tools]
    prompt = t.codec.chat(_messages(request), tools)
    return ChatJob(request, t, prompt)


def _logprobs(codec: TextCodec, tokens: Sequence[Token], k: int) -> list[dict[str, Any]]:
    out = []
    for token in tokens:
        text = codec.piece(token.id)
        top = sorted((token.top_logprobs or {}).items(), key=lambda kv: -kv[1])[:k]
        out.append(
            {
                "token": text,
                "logprob": token.logprob,
                "bytes": list(text.encode()),
                "top_logprobs": [
                    {"token": codec.piece(i), "logprob": lp, "bytes": list(codec.piece(i).encode())}
                    for i, lp in top
                ],
            }
        )
    return out


async def answer(plane: DataPlane, job: ChatJob) -> dict[str, Any]:
    """The whole ``chat.completion``: the chunks of its stream joined, choice by choice (so it
    says what the stream says, tool calls included)."""
    texts: dict[int, list[str]] = {c.index: [] for c in job.choices}
    calls: dict[int, list[dict[str, Any]]] = {c.index: [] for c in job.choices}
    tokens: dict[int, list[Any]] = {c.index: [] for c in job.choices}
    reasons: dict[int, str | None] = {}
    async with contextlib.aclosing(stream(plane, job)) as chunks:
        async for chunk in chunks:
            for part in chunk["choices"]:
                i, delta = part["index"], part["delta"]
                texts[i].append(delta.get("content", ""))
                for call in delta.get("tool_calls", ()):
                    if "id" in call:  # a call's head, with its name; its arguments follow
                        calls[i].append(
                            {
                                "id": call["id"],
                                "type": call["type"],
                                "function": {**call["function"]},
                            }
                        )
                    else:
                        calls[i][-1]["function"]["arguments"] += call["function"]["arguments"]
                tokens[i] += (part["logprobs"] or {}).get("content", [])
                reasons[i] = part["finish_reason"] or reasons.get(i)
    choices = []
    for c in job.choices:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(texts[c.index])}
        if calls[c.index]:
            message["content"] = message["content"] or None
            message["tool_calls"] = calls[c.index]
        choices.append(
            {
                "index": c.index,
                "message": message,
                "logprobs": {"content": tokens[c.index]} if job.request.logprobs else None,
                "finish_reason": reasons.get(c.index) or "stop",
            }
        )
    return {**job.head("chat.completion"), "choices": choices, "usage": job.usage()}


class _Held:
    """A choice's text held back while it may be tool calls (streams with tools)."""

    __slots__ = ("text", "tokens", "open")

    def __init__(self) -> None:
        self.text = ""
        self.tokens: list[Token] = []
        self.open = True


async def stream(plane: DataPlane, job: ChatJob) -> AsyncGenerator[dict[str, Any], None]:
    """The ``chat.completion.chunk`` objects of a stream, in order (the caller frames them)."""
    request = job.request
    k = request.top_logprobs or 0
    held = {c.index: _Held() for c in job.choices} if job.tools else {}
    base = job.head("chat.completion.chunk")

    def chunk(
        index: int, delta: dict[str, Any], tokens: Sequence[Token], reason: str | None
    ) -> Any:
        logprobs = None
        if request.logprobs and tokens:
            logprobs = {"content": _logprobs(job.codec, tokens, k)}
        out = {
            **base,
            "choices": [
                {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": reason}
            ],
        }
        if job.continuous:  # the tokens so far (none yet in a role chunk, as vLLM counts)
            out["usage"] = job.usage(0 if "role" in delta else None)
        return out

    gen = job.pieces(plane)
    try:
        every = await started(gen)
        for c in job.choices:
            yield chunk(c.index, {"role": "assistant", "content": ""}, [], None)
        async for piece in every:
            hold = held.get(piece.index)
            if hold is not None and hold.open:
                hold.text += piece.text
                hold.tokens.extend(piece.tokens)
                if piece.finish_reason is None:
                    if could_be_call(hold.text):
                        continue
                    hold.open = False  # plain text after all: out it goes
                    yield chunk(piece.index, {"content": hold.text}, hold.tokens, None)
                    continue
                for out in _finish_held(job, piece, hold, chunk):
                    yield out
                continue
            if piece.text or piece.tokens or piece.finish_reason is not None:
                delta = {"content": piece.text} if piece.text else {}
                yield chunk(piece.index, delta, piece.tokens, piece.finish_reason)
    finally:
        await gen.aclose()
    if job.include_usage:
        yield {**base, "choices": [], "usage": job.usage()}


def _finish_held(job: ChatJob, piece: Piece, hold: _Held, chunk: Any) -> list[Any]:
    """A held choice's end: its tool calls as deltas (name and id first, then the arguments),
    or its text."""
    content, calls = parse_tool_calls(hold.text, job.tools, job.named)
    if not calls:
        return [chunk(piece.index, {"content": hold.text}, hold.tokens, piece.finish_reason)]
    out = []
    if content:
        out.append(chunk(piece.index, {"content": content}, [], None))
    for i, call in enumerate(calls):
        head = {
            "index": i,
            "id": call["id"],
            "type": "function",
            "function": {"name": call["function"]["name"], "arguments": ""},
        }
        out.append(chunk(piece.index, {"tool_calls": [head]}, [], None))
        arguments = {"index": i, "function": {"arguments": call["function"]["arguments"]}}
        out.append(chunk(piece.index, {"tool_calls": [arguments]}, [], None))
    out.append(chunk(piece.index, {}, hold.tokens, "tool_calls"))
    return out
