"""A truss with what Truss's routes reach besides predict: a chat_completions method that
streams when asked, a health check (tests/server/test_http_truss.py)."""

from starlette.exceptions import HTTPException  # (fastapi's is one of these)


class Model:
    def __init__(self, **kwargs):
        self.healthy = True

    def predict(self, model_input):
        if model_input.get("teapot"):
            raise HTTPException(status_code=418, detail="short and stout")
        if model_input.get("unhealthy"):
            self.healthy = False
        if model_input.get("stream"):
            return (f"{word} " for word in model_input["text"].split())
        return {"echo": model_input}

    def is_healthy(self):
        return self.healthy

    def chat_completions(self, model_input):
        if model_input.get("stream"):
            return (f"data: {word}\n\n" for word in ("hello", "there"))
        return {"choices": [{"message": {"content": "hello there"}}]}
