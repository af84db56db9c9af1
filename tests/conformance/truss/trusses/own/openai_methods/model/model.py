import json


class Model:
    def predict(self, inputs):
        return {"predict": inputs}

    def chat_completions(self, inputs):
        content = " ".join(m["content"] for m in inputs.get("messages", []))
        if inputs.get("stream"):
            return self._chunks(content)
        return {
            "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}],
        }

    def _chunks(self, content):
        for word in content.split():
            delta = {"choices": [{"index": 0, "delta": {"content": word}}]}
            yield f"data: {json.dumps(delta)}\n\n"
        yield "data: [DONE]\n\n"

    async def completions(self, inputs):
        for i in range(inputs.get("n", 2)):
            yield f"c{i} "
