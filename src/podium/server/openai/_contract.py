"""What a generative OpenAI model and the server say to each other (the model contract).

A generative OpenAI model is a native Podium model with ``continuous_batching: true``: it sets
``self.tokenizer`` (a ``transformers`` tokenizer, with a ``chat_template`` for chat, or a
``tokenizers.Tokenizer``) and ``self.context_length`` (the most prompt + completion tokens) in
``load()``, and its ``step(batch)`` advances every running :class:`Generation` by one token.
Each generation's ``inputs`` is a :class:`Sampling` (one per choice); each step the model emits
one :class:`Token` (or a plain ``int`` id) per generation, and calls ``finish()`` when it sampled
EOS (unless ``ignore_eos``) or one of ``stop_token_ids``, or reached ``max_tokens``. When
``prompt_logprobs`` is set its first emit is a :class:`PromptLogprobs`.

The server tokenizes (and applies the chat template), detokenizes incrementally, applies
``stop`` strings, counts usage and picks ``finish_reason``; it stops a choice early (a stop
string, a client gone) by closing its stream, so the generation leaves the batch before the
next step. See ``docs/openai.md``.
"""

from __future__ import annotations

import msgspec

__all__ = ["PromptLogprobs", "Sampling", "Token"]


class Sampling(msgspec.Struct, frozen=True):
    """What one generated choice asks of the model: its prompt's token ids and how to sample.

    ``max_tokens`` is a promise the server keeps anyway (it stops the choice there); a model
    that honours it saves the step. ``temperature`` 0 is greedy. ``logprobs`` ``None`` asks for
    none; ``k >= 0`` asks for the chosen token's logprob and the ``k`` most likely ones.
    ``prompt_logprobs`` (``echo`` with ``logprobs``) asks for the prompt tokens' logprobs,
    emitted once as a :class:`PromptLogprobs` before any token. ``stop_token_ids`` end the
    choice besides the tokenizer's EOS, which ``ignore_eos`` disregards. ``index`` is the
    choice's index: ``n > 1`` makes ``n`` Samplings of one request.
    """

    prompt_token_ids: list[int]
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    stop_token_ids: list[int] = []
    ignore_eos: bool = False
    index: int = 0


class Token(msgspec.Struct, frozen=True):
    """One generated token: its id and, when asked, its logprob and the top alternatives
    (token id → logprob)."""

    id: int
    logprob: float | None = None
    top_logprobs: dict[int, float] | None = None


class PromptLogprobs(msgspec.Struct, frozen=True):
    """The prompt's token logprobs, one per prompt token (the first ``None``), emitted once
    before any :class:`Token` when ``Sampling.prompt_logprobs`` is set; ``top_logprobs`` holds
    the most likely alternatives per position where asked."""

    logprobs: list[float | None]
    top_logprobs: list[dict[int, float] | None] | None = None
