"""A long async predict that watches its client through the raw request."""

import asyncio
import sys
from pathlib import Path

from starlette.requests import Request

_KIT = str(Path(__file__).resolve().parent.parent / "_lib")
if _KIT not in sys.path:
    sys.path.insert(0, _KIT)

from e2e_model_kit import plain, record  # noqa: E402


class Model:
    async def predict(self, inputs, request: Request):
        p = plain(inputs)
        tag, steps = p["tag"], int(p.get("steps", 500))
        record(tag, "start")
        try:
            for i in range(steps):
                if await request.is_disconnected():
                    record(tag, "saw-disconnect", i=i)
                    return {"completed": False}
                await asyncio.sleep(0.02)
        except asyncio.CancelledError:
            record(tag, "cancelled", disconnected=await request.is_disconnected())
            raise
        record(tag, "end")
        return {"completed": True}
