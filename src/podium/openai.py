"""The OpenAI model contract: what a generative model receives and emits (``docs/openai.md``).

A native model with ``continuous_batching: true`` that sets ``self.tokenizer`` and
``self.context_length`` in ``load()`` is served on ``/v1/chat/completions`` and
``/v1/completions``: each running generation's ``inputs`` is a :class:`Sampling`, and each step
the model emits a :class:`Token` (or an ``int`` id) per generation, a :class:`PromptLogprobs`
first where asked::

    from podium.openai import Sampling, Token

    class Model:
        def load(self):
            self.tokenizer = ...        # transformers or tokenizers
            self.context_length = 1024

        def step(self, batch):
            for g in batch:
                sampling: Sampling = g.inputs
                g.emit(Token(id=...))

A model may answer chat and completions itself instead: ``chat(self, request)`` /
``complete(self, request)`` get the validated :class:`ChatCompletionRequest` /
:class:`CompletionRequest` and return the text or yield it piece by piece.
"""

from .server.openai import (
    ChatCompletionRequest,
    CompletionRequest,
    EmbeddingRequest,
    PromptLogprobs,
    Sampling,
    Token,
)

__all__ = [
    "ChatCompletionRequest",
    "CompletionRequest",
    "EmbeddingRequest",
    "PromptLogprobs",
    "Sampling",
    "Token",
]
