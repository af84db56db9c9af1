"""Text and tokens, with the model's own tokenizer: prompts in, text out, stop strings.

:class:`TextCodec` adapts the two tokenizers a model may set (a ``transformers`` tokenizer, with
its ``chat_template`` for chat, or a ``tokenizers.Tokenizer``) to what the server needs: encode a
prompt, render a chat, decode tokens. :class:`Detokenizer` turns tokens into text as they come
(after vLLM's incremental detokenization: a token that ends inside a UTF-8 character or a word
piece adds nothing until the next completes it). :class:`StopText` applies ``stop`` strings to
that text, also across token boundaries: text that may be the start of a stop string is held
back until the next token says whether it is.
"""

from __future__ import annotations

from typing import Any

from ...errors import bounded
from ._protocol import OpenAIInvalid

__all__ = ["Detokenizer", "StopText", "TextCodec"]

#: Prompt tokens the detokenizer starts from: the context that decides a first token's spacing.
_CONTEXT = 6


class TextCodec:
    """A model's tokenizer, as the server uses it (``transformers`` or ``tokenizers``)."""

    def __init__(self, tokenizer: Any, model: str) -> None:
        self.tokenizer = tokenizer
        self.model = model
        #: A ``transformers`` tokenizer (else a ``tokenizers.Tokenizer``)
        self.transformers = hasattr(tokenizer, "convert_ids_to_tokens")
        self.eos: frozenset[int] = frozenset()
        eos = getattr(tokenizer, "eos_token_id", None)
        if isinstance(eos, int):
            self.eos = frozenset((eos,))
        self._pieces: dict[int, str] = {}
        # A transformers tokenizer decodes through its backend (a tokenizers.Tokenizer), where
        # it would only add its clean-up pass: the same text for a fraction of the cost
        backend = getattr(tokenizer, "backend_tokenizer", None) if self.transformers else None
        cleans = getattr(tokenizer, "clean_up_tokenization_spaces", False)
        self._backend = backend if backend is not None and not cleans else None

    def encode(self, text: str, *, special: bool = True) -> list[int]:
        """``text``'s token ids (with the tokenizer's special tokens where it adds them)."""
        if self.transformers:
            return list(self.tokenizer.encode(text, add_special_tokens=special))
        return list(self.tokenizer.encode(text, add_special_tokens=special).ids)

    def decode(self, ids: list[int]) -> str:
        if self._backend is not None:
            return str(self._backend.decode(ids, skip_special_tokens=True))
        return str(self.tokenizer.decode(ids, skip_special_tokens=True))

    def piece(self, token: int) -> str:
        """One token's text, as logprobs name it (cached: a vocabulary is finite)."""
        text = self._pieces.get(token)
        if text is None:
            text = self._pieces[token] = str(self.tokenizer.decode([token]))
        return text

    def check_ids(self, ids: list[int], param: str) -> None:
        size = self.vocabulary_size()
        if size is not None:
            for token in ids:
                if token >= size:
                    raise OpenAIInvalid(
                        f"token id {token} is outside model '{self.model}''s vocabulary "
                        f"(0 to {size - 1})",
                        param,
                    )

    def vocabulary_size(self) -> int | None:
        try:
            if self.transformers:
                return int(len(self.tokenizer))
            return int(self.tokenizer.get_vocab_size(with_added_tokens=True))
        except (TypeError, AttributeError):
            return None

    def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
        """The conversation rendered by the model's chat template, ready for the assistant's
        turn, as token ids; 400 when the model has no template or the template refuses it."""
        template = getattr(self.tokenizer, "chat_template", None)
        if not self.transformers or not template:
            raise OpenAIInvalid(
                f"model '{self.model}' has no chat template (its tokenizer's chat_template); "
                "use /v1/completions with a prompt",
                "messages",
            )
        try:
            text = self.tokenizer.apply_chat_template(
                messages, tools=tools, add_generation_prompt=True, tokenize=False
            )
        except Exception as exc:  # jinja's TemplateError, raise_exception(...) in the template
            raise OpenAIInvalid(
                bounded(f"model '{self.model}''s chat template refused the messages: {exc}"),
                "messages",
            ) from None
        return self.encode(str(text), special=False)


class Detokenizer:
    """Text from tokens as they come. ``add`` returns the text the token completes ("" while a
    character or a word piece is unfinished)."""

    __slots__ = ("_codec", "_ids", "_prefix", "_read")

    def __init__(self, codec: TextCodec, prompt: list[int]) -> None:
        self._codec = codec
        self._ids = list(prompt[-_CONTEXT:])
        self._prefix = 0
        self._read = len(self._ids)

    def add(self, token: int) -> str:
        ids = self._ids
        ids.append(token)
        decode = self._codec.decode
        before = decode(ids[self._prefix : self._read])
        after = decode(ids[self._prefix :])
        if len(after) > len(before) and not after.endswith("\ufffd"):
            self._prefix = self._read
            self._read = len(ids)
            return after[len(before) :]
        return ""


class StopText:
    """A choice's text with its ``stop`` strings applied: ``add`` returns the text that may go
    to the client now, holding back what could still begin a stop string; once one appears the
    text ends before it (``stopped``)."""

    __slots__ = ("text", "released", "stopped", "_stops", "_hold")

    def __init__(self, stop: str | list[str] | None) -> None:
        """``stop``: a request's ``stop`` field, one string or several (or none)."""
        self.text = ""
        self.released = 0
        self.stopped = False
        self._stops = [s for s in ([stop] if isinstance(stop, str) else stop or ()) if s]
        self._hold = max((len(s) for s in self._stops), default=1) - 1

    def add(self, delta: str) -> str:
        if self.stopped or not delta:
            return ""
        searched = max(0, len(self.text) - self._hold)
        self.text += delta
        if self._stops:
            cut = -1
            for stop in self._stops:
                at = self.text.find(stop, searched)
                if at >= 0 and (cut < 0 or at < cut):
                    cut = at
            if cut >= 0:
                self.text = self.text[:cut]
                self.stopped = True
                return self._release(len(self.text))
        return self._release(len(self.text) - self._hold)

    def flush(self) -> str:
        """What was held back, at the end of the choice."""
        return self._release(len(self.text))

    def _release(self, upto: int) -> str:
        if upto <= self.released:
            return ""
        out = self.text[self.released : upto]
        self.released = upto
        return out
