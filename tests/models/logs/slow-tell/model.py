"""One request at a time (predict_concurrency 1), each taking a fifth of a second: a second
request at once waits for the slot."""

import asyncio

import numpy as np


class Model:
    async def predict(self, inputs):
        await asyncio.sleep(0.2)
        return {"done": np.array([1])}
