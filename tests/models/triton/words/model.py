"""A generator (Triton's decoupled model): one response per word of its BYTES input."""


class Model:
    async def predict(self, inputs: dict):
        for word in inputs["text"][0].decode().split():
            yield {"word": word}
