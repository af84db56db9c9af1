"""OpenAI's API (issue 23), a front end of its own, after vLLM's entrypoints: the request and
response types (``_protocol``) so far; the routes and their serving on the data plane follow."""

from ._contract import PromptLogprobs, Sampling, Token
from ._protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    EmbeddingRequest,
    OpenAIInvalid,
    decode,
)

__all__ = [
    "ChatCompletionRequest",
    "CompletionRequest",
    "EmbeddingRequest",
    "OpenAIInvalid",
    "PromptLogprobs",
    "Sampling",
    "Token",
    "decode",
]
