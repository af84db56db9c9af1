"""A Triton-shaped sequence model, for Triton's sequence clients: ``INPUT`` (INT32, ``[1, 1]``)
in, ``OUTPUT`` (INT32, ``[1, 1]``) the running sum of the sequence's inputs out. Each request
takes 20 ms, so that requests written back to back pile up behind the one running."""

import asyncio

import numpy as np

from podium import Context


class Model:
    async def predict(self, inputs: dict, context: Context) -> dict:
        await asyncio.sleep(0.02)
        total = context.state.get("total", 0) + int(np.asarray(inputs["INPUT"]).sum())
        context.state["total"] = total
        return {"OUTPUT": np.array([[total]], dtype=np.int32)}
