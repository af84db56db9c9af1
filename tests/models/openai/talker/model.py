"""A test model of OpenAI's simple contract: its own ``chat`` (a sync generator of words: a
stream) and ``complete`` (async, the whole text), no tokenizer, no predict."""

from __future__ import annotations

from podium.openai import ChatCompletionRequest, CompletionRequest


class Model:
    def chat(self, request: ChatCompletionRequest):
        last = request.messages[-1].content
        for word in f"you said: {last}".split(" "):
            yield word + " "

    async def complete(self, request: CompletionRequest) -> str:
        return str(request.prompt).upper()
