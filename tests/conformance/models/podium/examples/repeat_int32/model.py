"""The twin of Triton's `repeat_int32` example model: one answer per element of IN, each after
DELAY[i] milliseconds (a generator ``predict`` streams)."""

import asyncio

import numpy as np


class Model:
    async def predict(self, inputs: dict):
        delays = inputs["DELAY"]
        for i, value in enumerate(inputs["IN"]):
            await asyncio.sleep(float(delays[i]) / 1000.0 if i < len(delays) else 0.0)
            yield {"OUT": np.array([value], dtype=np.int32), "IDX": np.array([i], dtype=np.uint32)}
