"""A continuous-batching test model: each request ({"tag": t, "n": k}) gets k items, one per
step; every step appends the tags it advanced to the events file (PODIUM_E2E_EVENTS)."""

import asyncio
import json
import os

from podium import Generation


def _one(value):
    """One value from what a protocol gives: JSON as it is, an OIP tensor's single element."""
    value = value.tolist() if hasattr(value, "tolist") else value
    while isinstance(value, list):
        value = value[0]
    return value


class Model:
    async def step(self, batch: list[Generation]) -> None:
        await asyncio.sleep(0.02)
        tags = [_one(g.inputs["tag"]) for g in batch]
        path = os.environ.get("PODIUM_E2E_EVENTS")
        if path:
            with open(path, "a") as f:  # noqa: ASYNC230 - a test model's event log line
                f.write(json.dumps({"tag": "steps", "event": "step", "batch": tags}) + "\n")
        for g, tag in zip(batch, tags, strict=True):
            done = g.state.get("done", 0) + 1
            g.state["done"] = done
            g.emit(f"{tag}:{done}\n")  # one line per item on the chunked routes
            if done >= int(_one(g.inputs["n"])):
                g.finish()
