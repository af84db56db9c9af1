"""A deterministic generating test model for OpenAI's API: a character-level tokenizer (built
with ``tokenizers``, wrapped as a ``transformers`` tokenizer with a chat template) and a step
that writes a fixed text.

- Greedy (temperature 0, or no seed): the completion is ``REPLY`` from its start, one character
  per step; with a ``seed`` and temperature > 0 it starts ``seed`` characters in.
- A prompt holding ``hold`` emits nothing and stays in the batch until its client leaves;
  one holding ``short`` ends (EOS) after 5 tokens; one holding ``weather`` writes a
  Hermes-style tool call and ends; one holding ``boom`` makes the step raise at its third token.
- Logprobs: the chosen token -0.25, the next ``k - 1`` characters of the vocabulary below it.
- Each step appends the tags of the prompts it advanced (``tag:XXXX`` in the prompt) to the
  events file (``PODIUM_E2E_EVENTS``): tests count the steps a request took part in.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import string

from podium import Generation
from podium.openai import PromptLogprobs, Sampling, Token

REPLY = "Hello there, friend. How are you today? "
TOOL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
CHARS = string.printable
SPECIAL = ["<eos>", "<unk>"]
TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
    "{% if tools %}<tools>{{ tools | length }}\n{% endif %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)
_TAG = re.compile(r"tag:(\w+)")


def build_tokenizer():
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {c: i for i, c in enumerate(CHARS)}
    for s in SPECIAL:
        vocab[s] = len(vocab)
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<eos>", unk_token="<unk>")
    tok.chat_template = TEMPLATE
    return tok


class Model:
    def load(self) -> None:
        self.tokenizer = build_tokenizer()
        self.context_length = 4096
        self.eos = self.tokenizer.eos_token_id

    def _plan(self, g: Generation) -> str:
        s: Sampling = g.inputs
        prompt = self.tokenizer.decode(s.prompt_token_ids)
        g.state["tag"] = (_TAG.search(prompt) or [None, "-"])[1]
        g.state["boom"] = "boom" in prompt
        g.state["hold"] = "hold" in prompt
        if "weather" in prompt:
            return TOOL
        start = s.seed % len(REPLY) if s.seed is not None and s.temperature > 0 else 0
        text = (REPLY * 20)[start:]
        return text[:5] if "short" in prompt else text

    def _token(self, token: int, k: int | None) -> Token:
        if k is None:
            return Token(token)
        top = {token: -0.25}
        for j in range(1, k):
            top[(token + j) % len(CHARS)] = -0.25 - j
        return Token(token, -0.25, top if k else None)

    async def step(self, batch: list[Generation]) -> None:
        await asyncio.sleep(0.005)
        path = os.environ.get("PODIUM_E2E_EVENTS")
        for g in batch:
            if g.first:
                g.state["text"] = self._plan(g)
                g.state["i"] = 0
        if path:
            tags = [g.state["tag"] for g in batch]
            with open(path, "a") as f:  # noqa: ASYNC230 - a test model's event log line
                f.write(json.dumps({"tag": "openai-steps", "event": "step", "batch": tags}) + "\n")
        for g in batch:
            s: Sampling = g.inputs
            if g.first and s.prompt_logprobs is not None:
                n = len(s.prompt_token_ids)
                logprobs = [None] + [-1.0] * (n - 1)
                tops = [None] + [{t: -1.0} for t in s.prompt_token_ids[1:]]
                g.emit(PromptLogprobs(logprobs, tops))
                if s.max_tokens == 0:
                    g.finish()
                    continue
            if g.state["hold"]:
                continue
            i = g.state["i"]
            if g.state["boom"] and i == 2:
                raise RuntimeError("boom on purpose")
            text = g.state["text"]
            if i >= len(text):
                g.emit(self._token(self.eos, s.logprobs))
                if not s.ignore_eos:
                    g.finish()
                    continue
                token = self.tokenizer.convert_tokens_to_ids("x")
            else:
                token = self.tokenizer.convert_tokens_to_ids(text[i])
            if i < len(text):
                g.emit(self._token(token, s.logprobs))
            g.state["i"] = i + 1
            if i + 1 >= s.max_tokens or token in s.stop_token_ids:
                g.finish()
