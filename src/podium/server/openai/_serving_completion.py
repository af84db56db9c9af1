"""``POST /v1/completions`` on a generating model (docs/openai.md, "Completions").

``prompt`` is a string, strings, token ids, or lists of token ids; each prompt has ``n``
choices, indexed ``prompt * n + i``. ``echo`` puts the prompt before the completion's text;
``logprobs: k`` gives each token's logprob and its ``k`` most likely alternatives (the token
itself included, as vLLM does), and with ``echo`` the prompt's tokens' too (the first is
``null``). lm-eval's ``local-completions`` scores with ``echo`` + ``logprobs`` + ``max_tokens``
0 or 1: ``max_tokens: 0`` asks the model for the prompt's logprobs only.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

from ._contract import PromptLogprobs, Token
from ._generate import Choice, Job, started
from ._protocol import CompletionRequest, OpenAIInvalid, decode
from ._serving import Target, check_choices, samplings, target, texts_or_ids, token_limit
from ._tokens import TextCodec

if TYPE_CHECKING:
    from ...dataplane import DataPlane

__all__ = ["CompletionJob", "answer", "prepare", "stream"]


class CompletionJob(Job):
    """One completions request, checked and tokenized, with its choices."""

    def __init__(self, request: CompletionRequest, t: Target, prompts: list[list[int]]) -> None:
        super().__init__(request, t, "cmpl", sum(len(p) for p in prompts))
        k = request.logprobs
        echo_logprobs = k if request.echo and k is not None else None
        self.prompt_of: dict[int, list[int]] = {}
        for p, prompt in enumerate(prompts):
            param = "max_tokens"
            limit = token_limit(t, len(prompt), request.max_tokens, param, "prompt")
            for s in samplings(
                request, prompt, limit, p * request.n, logprobs=k, prompt_logprobs=echo_logprobs
            ):
                self.choices.append(Choice(s, self.codec, request.stop, t.mv.name))
                self.prompt_of[s.index] = prompt


def prepare(plane: DataPlane, body: bytes | dict[str, Any]) -> CompletionJob:
    """The request decoded, checked against the model, and tokenized; 400/404 otherwise."""
    request = decode(body, CompletionRequest)
    if request.suffix:
        raise OpenAIInvalid(
            "'suffix' is not supported: the model does not fill in the middle", "suffix"
        )
    if request.best_of is not None and request.best_of != request.n:
        raise OpenAIInvalid("'best_of' other than 'n' is not supported", "best_of")
    t = target(plane, request.model, "generates")
    assert t.codec is not None
    codec = t.codec
    prompts = [codec.encode(p) if isinstance(p, str) else p for p in texts_or_ids(request.prompt)]
    for i, ids in enumerate(prompts):
        t.codec.check_ids(ids, "prompt" if len(prompts) == 1 else f"prompt[{i}]")
        if not ids:
            raise OpenAIInvalid("the prompt encodes to no tokens", "prompt")
    check_choices(len(prompts) * request.n)
    return CompletionJob(request, t, prompts)


class _Logprobs:
    """One choice's ``logprobs`` object, built as its tokens come (with running text offsets)."""

    __slots__ = ("codec", "k", "offset", "tokens", "token_logprobs", "top_logprobs", "text_offset")

    def __init__(self, codec: TextCodec, k: int, offset: int = 0) -> None:
        self.codec = codec
        self.k = k
        self.offset = offset
        self.tokens: list[str] = []
        self.token_logprobs: list[float | None] = []
        self.top_logprobs: list[dict[str, float] | None] = []
        self.text_offset: list[int] = []

    def add(self, token: int, logprob: float | None, top: dict[int, float] | None) -> None:
        text = self.codec.piece(token)
        self.tokens.append(text)
        self.token_logprobs.append(logprob)
        if top is None:
            self.top_logprobs.append(None)
        else:
            best = sorted(top.items(), key=lambda kv: -kv[1])[: self.k]
            entry = {self.codec.piece(i): lp for i, lp in best}
            if logprob is not None:
                entry.setdefault(text, logprob)
            self.top_logprobs.append(entry)
        self.text_offset.append(self.offset)
        self.offset += len(text)

    def add_prompt(self, prompt: list[int], given: PromptLogprobs) -> None:
        tops = given.top_logprobs or [None] * len(prompt)
        for token, lp, top in zip(prompt, given.logprobs, tops, strict=False):
            self.add(token, lp, top if top is not None else ({} if lp is not None else None))

    def add_tokens(self, tokens: list[Token]) -> None:
        for t in tokens:
            self.add(t.id, t.logprob, t.top_logprobs if t.top_logprobs is not None else {})

    def take(self) -> dict[str, Any]:
        """What was added since the last take (a stream's chunk)."""
        out = {
            "tokens": self.tokens,
            "token_logprobs": self.token_logprobs,
            "top_logprobs": self.top_logprobs,
            "text_offset": self.text_offset,
        }
        self.tokens, self.token_logprobs, self.top_logprobs, self.text_offset = [], [], [], []
        return out


def _check_prompt_logprobs(job: CompletionJob, index: int, given: PromptLogprobs) -> None:
    if len(given.logprobs) != len(job.prompt_of[index]):
        from ...errors import BadModelOutput

        raise BadModelOutput(
            f"model '{job.target.mv.name}' emitted {len(given.logprobs)} prompt logprobs for a "
            f"prompt of {len(job.prompt_of[index])} tokens"
        )


async def answer(plane: DataPlane, job: CompletionJob) -> dict[str, Any]:
    """The whole ``text_completion``: the chunks of its stream joined, choice by choice."""
    texts: dict[int, list[str]] = {c.index: [] for c in job.choices}
    logprobs: dict[int, dict[str, list[Any]]] = {}
    reasons: dict[int, str | None] = {}
    async with contextlib.aclosing(stream(plane, job)) as chunks:
        async for chunk in chunks:
            for part in chunk["choices"]:
                i = part["index"]
                texts[i].append(part["text"])
                for key, values in (part["logprobs"] or {}).items():
                    logprobs.setdefault(i, {}).setdefault(key, []).extend(values)
                reasons[i] = part["finish_reason"] or reasons.get(i)
    choices = [
        {
            "index": c.index,
            "text": "".join(texts[c.index]),
            "logprobs": logprobs.get(c.index),
            "finish_reason": reasons.get(c.index) or "length",
        }
        for c in job.choices
    ]
    return {**job.head("text_completion"), "choices": choices, "usage": job.usage()}


async def stream(plane: DataPlane, job: CompletionJob) -> AsyncGenerator[dict[str, Any], None]:
    """The ``text_completion`` chunks of a stream, in order (the caller frames them)."""
    request = job.request
    k = request.logprobs
    base = job.head("text_completion")
    logprobs = {c.index: _Logprobs(job.codec, k) for c in job.choices} if k is not None else {}

    def chunk(index: int, text: str, reason: str | None) -> dict[str, Any]:
        lp = logprobs.get(index)
        out = {
            **base,
            "choices": [
                {
                    "index": index,
                    "text": text,
                    "logprobs": lp.take() if lp is not None else None,
                    "finish_reason": reason,
                }
            ],
        }
        if job.continuous:
            out["usage"] = job.usage()
        return out

    waits_for_prompt = request.echo and k is not None
    gen = job.pieces(plane)
    try:
        every = await started(gen)
        if request.echo and not waits_for_prompt:
            for c in job.choices:
                yield chunk(c.index, job.codec.decode(job.prompt_of[c.index]), None)
        async for piece in every:
            text = piece.text
            lp = logprobs.get(piece.index)
            if piece.prompt_logprobs is not None and waits_for_prompt and lp is not None:
                _check_prompt_logprobs(job, piece.index, piece.prompt_logprobs)
                lp.add_prompt(job.prompt_of[piece.index], piece.prompt_logprobs)
                text = job.codec.decode(job.prompt_of[piece.index]) + text
            if lp is not None:
                lp.add_tokens(piece.tokens)
            yield chunk(piece.index, text, piece.finish_reason)
    finally:
        await gen.aclose()
    if job.include_usage:
        yield {**base, "choices": [], "usage": job.usage()}
