"""The continuous-batching benchmark's generator: each step costs ~10 ms whatever the batch (up
to 8), as a batched accelerator step does; a request asks for ``length`` items, one per step."""

import asyncio

from podium import Generation

STEP_S = 0.010


class Model:
    async def step(self, batch: list[Generation]) -> None:
        await asyncio.sleep(STEP_S)  # one step of the whole batch
        for g in batch:
            done = g.state.get("done", 0) + 1
            g.state["done"] = done
            g.emit(done)
            if done >= int(g.inputs["length"]):
                g.finish()
