"""Sequences with an absolute age limit (1 s) and a one-request queue; ``{"hold": s}`` makes a
request take s seconds, so a second and third request of the sequence can pile up behind it."""

import asyncio

from podium import Context


class Model:
    async def predict(self, inputs: dict, context: Context) -> dict:
        await asyncio.sleep(float(inputs.get("hold", 0)))
        context.state["n"] = context.state.get("n", 0) + 1
        return {"n": context.state["n"]}
