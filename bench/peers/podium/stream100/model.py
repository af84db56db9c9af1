"""bench/peers.py's stream on Podium's Truss route: ``{"n": 100}`` in, a chunked answer of
``n`` JSON lines ``{"i": k}`` out (an async generator: one chunk per item)."""

from collections.abc import AsyncIterator


class Model:
    async def predict(self, inputs: dict) -> AsyncIterator[dict]:
        for k in range(int(inputs["n"])):
            yield {"i": k}
