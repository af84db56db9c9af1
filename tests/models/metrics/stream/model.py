"""A generator: ``n`` items."""


class Model:
    async def predict(self, inputs):
        for i in range(int(inputs.get("n", 3))):
            yield {"i": i}
