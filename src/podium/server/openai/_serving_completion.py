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
from collections.abc import AsyncGenerator, Sequence
from typing import TYPE_CHECKING, Any

from ...errors import BadModelOutput
from ._contract import PromptLogprobs
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


#: A token id, its logprob, and its most likely alternatives (None: none, as for the prompt's
#: first token).
_Item = tuple[int, float | None, dict[int, float] | None]


class _Logprobs:
    """A choice's ``logprobs`` objects, one per stream chunk (text offsets run on across them)."""

    __slots__ = ("codec", "k", "offset")

    def __init__(self, codec: TextCodec, k: int) -> None:
        self.codec = codec
        self.k = k
        self.offset = 0

    def take(self, items: Sequence[_Item]) -> dict[str, Any]:
        """The ``logprobs`` object of ``items`` (with the chosen token among its alternatives)."""
        out: dict[str, list[Any]] = {
            "tokens": [],
            "token_logprobs": [],
            "top_logprobs": [],
            "text_offset": [],
        }
        for token, logprob, top in items:
            text = self.codec.piece(token)
            entry = None
            if top is not None:
                best = sorted(top.items(), key=lambda kv: -kv[1])[: self.k]
                entry = {self.codec.piece(i): lp for i, lp in best}
                if logprob is not None:
                    entry.setdefault(text, logprob)
            out["tokens"].append(text)
            out["token_logprobs"].append(logprob)
            out["top_logprobs"].append(entry)
            out["text_offset"].append(self.offset)
            self.offset += len(text)
        return out


def _prompt_items(job: CompletionJob, index: int, given: PromptLogprobs) -> list[_Item]:
    """Choice ``index``'s prompt tokens with the logprobs the model emitted for them."""
    prompt = job.prompt_of[index]
    if len(given.logprobs) != len(prompt):
        raise BadModelOutput(
            f"model '{job.target.mv.name}' emitted {len(given.logprobs)} prompt logprobs for a "
            f"prompt of {len(prompt)} tokens"
        )
    tops = given.top_logprobs or [None] * len(prompt)
    return [
        (token, lp, top if top is not None else ({} if lp is not None else None))
        for token, lp, top in zip(prompt, given.logprobs, tops, strict=False)
    ]


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

    def chunk(index: int, text: str, reason: str | None, items: Sequence[_Item] = ()) -> Any:
        lp = logprobs.get(index)
        out = {
            **base,
            "choices": [
                {
                    "index": index,
                    "text": text,
                    "logprobs": lp.take(items) if lp is not None else None,
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
            items: list[_Item] = []
            if k is not None:
                items = [(t.id, t.logprob, t.top_logprobs or {}) for t in piece.tokens]
            if piece.prompt_logprobs is not None and waits_for_prompt:
                items = _prompt_items(job, piece.index, piece.prompt_logprobs) + items
                text = job.codec.decode(job.prompt_of[piece.index]) + text
            yield chunk(piece.index, text, piece.finish_reason, items)
    finally:
        await gen.aclose()
    if job.include_usage:
        yield {**base, "choices": [], "usage": job.usage()}
