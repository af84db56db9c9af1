"""The same generator under static (dynamic) batching: a batch of up to 8 requests runs step by
step until its longest request is done (each step ~10 ms), and only then answers every request
of it with all its items; no request joins a running batch."""

import asyncio

STEP_S = 0.010


class Model:
    async def predict(self, batch: list[dict]) -> list[list[int]]:
        lengths = [int(inputs["length"]) for inputs in batch]
        for _ in range(max(lengths)):
            await asyncio.sleep(STEP_S)
        return [list(range(1, n + 1)) for n in lengths]
