"""OpenAI's API (issue 23), a front end of its own, after vLLM's entrypoints: the request types
(``_protocol``), the model contract (``_contract``), the routes (``_routes``) and their serving
on the data plane (``_serving*``)."""

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
