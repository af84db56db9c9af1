"""A tiny GPT-2 decoder with continuous batching: one batched forward pass per step, with a KV
cache, over every running generation (README.md beside this file).

Framework-neutral: :meth:`Engine.step` takes objects shaped like Podium's ``Generation``
(``inputs``: a ``podium.openai.Sampling``-like object; ``state``: a dict that lives as long as the
generation; ``emit(item)``; ``finish()``), so Podium's ``model.py`` and the benchmark's LitServe
peer (bench/openai_litserve.py) run the same code.

How a step goes:

- **Prefill.** Generations new to the engine run together in one forward pass over their
  prompts, left-padded to the longest with an attention mask and per-row position ids. Each
  keeps its own slice of the resulting KV cache and samples its first token from the last
  position (and, when asked, the prompt's logprobs from every position).
- **Decode.** The others run together in one forward pass of one token each over a *packed*
  cache: every row's keys/values left-padded to the longest, with a mask. While the set of
  decoding rows stays the same from one step to the next the packed cache just grows by one
  position per step (no copying); when it changes (a row joins, finishes, leaves or sits out a
  step) the packed cache is unpacked into per-row slices and packed again for the new set, which
  drops the padding that no longer serves.
- **Sampling**, per row (one exponential and one two-level draw for all sampled rows of a step): presence/frequency penalties over the tokens generated so far,
  temperature (0: greedy argmax, deterministic), top-k, top-p, a per-choice ``seed`` (a
  ``torch.Generator`` seeded with ``seed + index``, so the choices of an ``n > 1`` request differ
  and choice 0 equals the same request with ``n = 1``). Logprobs are the model's own
  (``log_softmax`` of the raw logits, before penalties and temperature), as vLLM reports them.
"""

from __future__ import annotations

import functools
import inspect
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Protocol

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import DynamicCache, GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast
from transformers.utils import logging as transformers_logging

HERE = Path(__file__).resolve().parent
TOKENIZER_DIR = HERE / "tokenizer"
EOS = "<|endoftext|>"

#: The architecture: GPT-2's (byte-level BPE vocabulary of 50,257, learned positions, pre-LN
#: blocks, tied embeddings), two layers, 128 wide, four heads. Random weights from :data:`SEED`:
#: the point is a real transformer run the real way, not good text.
ARCHITECTURE: dict[str, Any] = {
    "vocab_size": 50257,
    "n_positions": 1024,
    "n_embd": 128,
    "n_layer": 2,
    "n_head": 4,
    "bos_token_id": 50256,
    "eos_token_id": 50256,
}
SEED = 0

#: A plain chat format (GPT-2 has none of its own): one "role: content" line per message, then
#: "assistant:" when a reply is wanted. Content given as parts is joined from its text parts.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['content'] is string %}{% set text = message['content'] %}"
    "{% elif message['content'] %}{% set text = message['content'] | selectattr('type', "
    "'equalto', 'text') | map(attribute='text') | join('') %}"
    "{% else %}{% set text = '' %}{% endif %}"
    "{{ message['role'] }}: {{ text }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


class Generation(Protocol):
    """What :meth:`Engine.step` needs of a generation (Podium's ``Generation`` has it)."""

    inputs: Any
    state: dict[str, Any]

    def emit(self, item: Any) -> None: ...

    def finish(self) -> None: ...


def build_tokenizer(directory: Path = TOKENIZER_DIR) -> PreTrainedTokenizerFast:
    """GPT-2's byte-level BPE tokenizer from its ``vocab.json`` and ``merges.txt``, with
    :data:`CHAT_TEMPLATE`."""
    bpe = Tokenizer(
        models.BPE.from_file(str(directory / "vocab.json"), str(directory / "merges.txt"))
    )
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token=EOS, bos_token=EOS, unk_token=EOS
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.model_max_length = ARCHITECTURE["n_positions"]
    return tokenizer


def build_model(weights: Path) -> GPT2LMHeadModel:
    """The model saved in ``weights``; made from :data:`ARCHITECTURE` and :data:`SEED` and saved
    there first if it is not (written to a temporary folder and renamed, so two processes that
    start at once never read half a file)."""
    if not (weights / "config.json").is_file():
        generator_state = torch.random.get_rng_state()
        torch.manual_seed(SEED)
        try:
            fresh = GPT2LMHeadModel(GPT2Config(**ARCHITECTURE))
        finally:
            torch.random.set_rng_state(generator_state)
        weights.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".gpt2-tiny-", dir=weights.parent))
        try:
            fresh.save_pretrained(staging)
            try:
                os.rename(staging, weights)
            except OSError:  # another process saved it first: use theirs
                if not (weights / "config.json").is_file():
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    model = GPT2LMHeadModel.from_pretrained(weights)
    model.eval()
    return model


class _Row:
    """One generation's place in the engine: its prompt and output, where its KV cache is and
    how it samples."""

    __slots__ = ("sampling", "prompt", "output", "kv", "pos", "generator")

    def __init__(self, sampling: Any, eos: int) -> None:
        self.sampling = sampling
        self.prompt: list[int] = list(sampling.prompt_token_ids) or [eos]
        self.output: list[int] = []
        #: Per layer (keys, values) of shape [1, heads, pos, head_dim] while the row is not in
        #: the packed cache; None while it is.
        self.kv: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        self.pos = 0  # tokens in the cache; the last output token is fed at this position
        self.generator: torch.Generator | None = None
        if sampling.seed is not None:
            self.generator = torch.Generator().manual_seed(int(sampling.seed) + sampling.index)


def _layers(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(keys, values) per layer of a ``DynamicCache`` (transformers 4.x and 5.x)."""
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache, strict=True))


class Engine:
    """The tokenizer, the model and the running batch of one model instance. Not thread-safe:
    one ``step`` at a time (Podium runs one per instance)."""

    def __init__(self, weights: Path, threads: int | None = None) -> None:
        if threads:
            torch.set_num_threads(threads)
        transformers_logging.disable_progress_bar()  # no bars in a server's log
        self.tokenizer = build_tokenizer()
        self.model = build_model(weights)
        self.eos = int(self.tokenizer.eos_token_id)
        self.context_length = int(ARCHITECTURE["n_positions"])
        self.vocab = int(ARCHITECTURE["vocab_size"])
        parameters = inspect.signature(self.model.forward).parameters
        # transformers 5 renamed past_key_values to cache (the old name warns, then goes)
        self._cache_arg = "cache" if "cache" in parameters else "past_key_values"
        self._keep_last = "logits_to_keep" in parameters
        self._packed: list[_Row] = []
        self._cache: Any = None
        self._mask: torch.Tensor | None = None
        self.steps = 0  # forward passes run (prefill and decode), for tests

    # --- one step ------------------------------------------------------------------------------

    def step(self, batch: list[Generation]) -> None:
        """Advance every generation of ``batch`` by one token: emit it (a ``Token`` when
        logprobs were asked, else its id) and ``finish()`` those that are done."""
        fresh: list[tuple[Generation, _Row]] = []
        running: list[tuple[Generation, _Row]] = []
        for g in batch:
            row = g.state.get("row")
            if row is None:
                row = g.state["row"] = _Row(g.inputs, self.eos)
                if len(row.prompt) >= self.context_length:
                    raise ValueError(
                        f"the prompt has {len(row.prompt)} tokens; the model's context is "
                        f"{self.context_length}"
                    )
                fresh.append((g, row))
            else:
                running.append((g, row))
        with torch.inference_mode():
            if running:
                self._advance(running, self._decode([row for _, row in running]))
            if fresh:
                logits, prompt_logits = self._prefill([row for _, row in fresh])
                going = []
                for i, (g, row) in enumerate(fresh):
                    if row.sampling.prompt_logprobs is not None:
                        g.emit(self._prompt_logprobs(row, prompt_logits[i]))
                    if row.sampling.max_tokens <= 0:
                        g.finish()
                    else:
                        going.append(i)
                if going:
                    self._advance([fresh[i] for i in going], logits[going])

    def _prefill(self, rows: list[_Row]) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """One forward pass over the rows' prompts (left-padded); each row keeps its slice of
        the cache. The last position's logits per row, and per row the logits of all its prompt
        positions where prompt logprobs were asked (else an empty tensor)."""
        width = max(len(row.prompt) for row in rows)
        ids = torch.full((len(rows), width), self.eos, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, width - len(row.prompt) :] = torch.tensor(row.prompt)
            mask[i, width - len(row.prompt) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        every = any(row.sampling.prompt_logprobs is not None for row in rows)
        extra = {"logits_to_keep": 1} if self._keep_last and not every else {}
        out = self.model(
            input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, **extra
        )
        self.steps += 1
        layers = _layers(self._cache_of(out))
        prompt_logits: list[torch.Tensor] = []
        for i, row in enumerate(rows):
            n = len(row.prompt)
            row.kv = [(k[i : i + 1, :, -n:], v[i : i + 1, :, -n:]) for k, v in layers]
            row.pos = n
            asked = row.sampling.prompt_logprobs is not None
            prompt_logits.append(out.logits[i, width - n :] if asked else out.logits[i, :0])
        return out.logits[:, -1], prompt_logits

    def _decode(self, rows: list[_Row]) -> torch.Tensor:
        """One forward pass of each row's last token over the packed cache; the logits [B, V]."""
        if len(rows) != len(self._packed) or any(
            a is not b for a, b in zip(rows, self._packed, strict=True)
        ):
            self._pack(rows)
        assert self._mask is not None
        ids = torch.tensor([[row.output[-1]] for row in rows], dtype=torch.long)
        positions = torch.tensor([[row.pos] for row in rows], dtype=torch.long)
        mask = torch.cat([self._mask, torch.ones((len(rows), 1), dtype=torch.long)], dim=1)
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            **{self._cache_arg: self._cache},
        )
        self.steps += 1
        self._cache = self._cache_of(out)
        self._mask = mask
        for row in rows:
            row.pos += 1
        return out.logits[:, -1]

    def _cache_of(self, out: Any) -> Any:
        cache = out.get(self._cache_arg)
        return out.get("past_key_values") if cache is None else cache

    def _pack(self, rows: list[_Row]) -> None:
        """Make the packed cache hold exactly ``rows`` (in that order)."""
        if self._packed:  # give the rows packed so far their own slices back
            layers = _layers(self._cache)
            for i, row in enumerate(self._packed):
                row.kv = [
                    (k[i : i + 1, :, -row.pos :], v[i : i + 1, :, -row.pos :]) for k, v in layers
                ]
        width = max(row.pos for row in rows)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        cache = DynamicCache()
        depth = len(rows[0].kv or ())
        for layer in range(depth):
            sample = (rows[0].kv or [])[layer][0]
            shape = (len(rows), sample.shape[1], width, sample.shape[3])
            keys, values = sample.new_zeros(shape), sample.new_zeros(shape)
            for i, row in enumerate(rows):
                assert row.kv is not None
                keys[i, :, width - row.pos :] = row.kv[layer][0][0]
                values[i, :, width - row.pos :] = row.kv[layer][1][0]
            cache.update(keys, values, layer)
        for i, row in enumerate(rows):
            mask[i, width - row.pos :] = 1
            row.kv = None
        self._packed, self._cache, self._mask = list(rows), cache, mask

    # --- sampling ------------------------------------------------------------------------------

    def _advance(self, pairs: list[tuple[Generation, _Row]], logits: torch.Tensor) -> None:
        """Pick each row's next token from its ``logits`` row [B, V], emit it, finish the rows
        that are done. Batched: one exponential and one draw (:func:`_draw`) for all sampled
        rows."""
        logits = logits.float()
        scores = logits  # copied only where a row changes it
        for i, (_, row) in enumerate(pairs):
            s = row.sampling
            penalised = bool((s.presence_penalty or s.frequency_penalty) and row.output)
            truncated = s.temperature > 1e-5 and (0 < s.top_k < self.vocab or s.top_p < 1.0)
            if (penalised or truncated) and scores is logits:
                scores = logits.clone()
            if penalised:
                counts = torch.bincount(torch.tensor(row.output), minlength=self.vocab)
                scores[i] -= s.frequency_penalty * counts + s.presence_penalty * (counts > 0)
            if truncated:
                scores[i] = _truncate(scores[i] / s.temperature, s.top_k, s.top_p) * s.temperature
        sampled = [i for i, (_, row) in enumerate(pairs) if row.sampling.temperature > 1e-5]
        greedy = [i for i in range(len(pairs)) if i not in set(sampled)]
        tokens = [0] * len(pairs)
        if greedy:
            whole = len(greedy) == len(pairs)
            picked = torch.argmax(scores if whole else scores[greedy], dim=-1).tolist()
            for i, pick in zip(greedy, picked, strict=True):
                tokens[i] = pick
        wanted = [i for i, (_, row) in enumerate(pairs) if row.sampling.logprobs is not None]
        logprobs = torch.log_softmax(logits[wanted], dim=-1) if wanted else None
        if sampled:  # after the logprobs: this may overwrite the logits
            rows = scores if len(sampled) == len(pairs) else scores[sampled]
            temperatures = [pairs[i][1].sampling.temperature for i in sampled]
            if any(t != 1.0 for t in temperatures):
                rows = rows / torch.tensor(temperatures).unsqueeze(1)
            # unnormalised probabilities, in place (no softmax pass: _draw scales by the total)
            weights = rows.sub_(rows.amax(dim=-1, keepdim=True)).exp_()
            draws = torch.cat([torch.rand(1, generator=pairs[i][1].generator) for i in sampled])
            for i, pick in zip(sampled, _draw(weights, draws), strict=True):
                tokens[i] = min(pick, self.vocab - 1)
        for i, (g, row) in enumerate(pairs):
            s, token = row.sampling, tokens[i]
            row.output.append(token)
            if s.logprobs is None or logprobs is None:
                g.emit(token)
            else:
                own = logprobs[wanted.index(i)]
                g.emit(_token(token, float(own[token]), _top(own, s.logprobs)))
            if (
                (token == self.eos and not s.ignore_eos)
                or token in s.stop_token_ids
                or len(row.output) >= s.max_tokens
                or row.pos + 1 >= self.context_length
            ):
                g.finish()

    def _prompt_logprobs(self, row: _Row, logits: torch.Tensor) -> Any:
        """The prompt's token logprobs from its positions' logits (the first token has none)."""
        k = row.sampling.prompt_logprobs
        given = list(row.sampling.prompt_token_ids)
        if not given:
            return _prompt(logprobs=[], top_logprobs=[] if k else None)
        logprobs = torch.log_softmax(logits[:-1].float(), dim=-1)  # position i predicts i + 1
        chosen = logprobs.gather(1, torch.tensor(given[1:]).unsqueeze(1)).squeeze(1).tolist()
        values: list[float | None] = [None, *chosen]
        top: list[dict[int, float] | None] | None = None
        if k:
            top = [None, *(_top(logprobs[i], k) for i in range(len(given) - 1))]
        return _prompt(logprobs=values, top_logprobs=top)


@functools.lru_cache
def _block(vocab: int) -> int:
    """The block size of :func:`_draw` for ``vocab`` tokens: the divisor of ``vocab`` nearest
    its square root (so the rows split into blocks without a padded copy), else 256."""
    root = math.isqrt(vocab)
    divisors = [d for d in range(16, 4 * root + 1) if vocab % d == 0]
    return min(divisors, key=lambda d: abs(d - root)) if divisors else 256


def _draw(probabilities: torch.Tensor, draws: torch.Tensor) -> list[int]:
    """One token per row of ``probabilities`` [B, V] (or weights: each row is scaled by its
    total) for the uniform ``draws`` [B] (inverse transform sampling: the first token whose
    cumulative probability reaches the draw). Two
    levels, so no row is scanned whole: the cumulative mass of blocks of tokens picks a block,
    the cumulative sum inside it picks the token (torch.multinomial and a full cumulative sum
    both cost far more on the CPU)."""
    rows, vocab = probabilities.shape
    size = _block(vocab)
    blocks = -(-vocab // size)
    if blocks * size != vocab:
        probabilities = torch.nn.functional.pad(probabilities, (0, blocks * size - vocab))
    split = probabilities.reshape(rows, blocks, size)
    mass = split.sum(-1).cumsum(-1)  # [B, blocks]
    target = (draws * mass[:, -1]).unsqueeze(1)
    block = torch.searchsorted(mass, target).clamp(max=blocks - 1)  # [B, 1]
    before = torch.where(block > 0, mass.gather(1, (block - 1).clamp(min=0)), 0.0)
    chosen = split[torch.arange(rows), block.squeeze(1)]  # [B, size]
    offset = torch.searchsorted(chosen.cumsum(-1), target - before).clamp(max=size - 1)
    tokens = (block * size + offset).squeeze(1)
    # rounding can land on a token of probability 0 (masked, or padding): take the most likely
    # token of that block instead
    zero = chosen.gather(1, offset).squeeze(1) <= 0
    if bool(zero.any()):
        tokens = torch.where(zero, block.squeeze(1) * size + chosen.argmax(-1), tokens)
    return [min(int(t), vocab - 1) for t in tokens.tolist()]


def _truncate(scores: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """``scores`` [V] with the tokens outside the top ``top_k`` and outside the smallest set
    whose probability reaches ``top_p`` set to -inf (the most likely token always stays)."""
    if 0 < top_k < scores.shape[-1]:
        kth = torch.topk(scores, top_k).values[-1]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p < 1.0:
        ordered, order = torch.sort(scores, descending=True)
        probabilities = torch.softmax(ordered, dim=-1)
        drop = probabilities.cumsum(-1) - probabilities >= top_p  # the mass before each token
        scores = scores.index_put((order[drop],), torch.tensor(float("-inf")))
    return scores


def _top(logprobs: torch.Tensor, k: int) -> dict[int, float]:
    if k <= 0:
        return {}
    values, ids = torch.topk(logprobs, k)
    return dict(zip(ids.tolist(), values.tolist(), strict=True))


def _token(token: int, logprob: float, top: dict[int, float]) -> Any:
    from podium.openai import Token  # here: the LitServe peer runs without Podium

    return Token(id=token, logprob=logprob, top_logprobs=top)


def _prompt(**fields: Any) -> Any:
    from podium.openai import PromptLogprobs

    return PromptLogprobs(**fields)
