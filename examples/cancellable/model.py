"""A long job that watches its client: it stops early when the client goes away.

``predict`` takes the raw request (``starlette.requests.Request``) and polls
``is_disconnected()`` between steps. Podium also cancels the call itself on disconnect, so a
model that never polls is stopped too; polling lets a sync or stepwise job stop cleanly.
"""

import asyncio
import logging

from starlette.requests import Request

log = logging.getLogger("examples.cancellable")


class Model:
    async def predict(self, inputs, request: Request):
        steps = int(inputs.get("steps", 50)) if isinstance(inputs, dict) else 50
        done = 0
        try:
            for _ in range(steps):
                if await request.is_disconnected():
                    log.info("client left after %d of %d steps; stopping", done, steps)
                    return {"completed": False, "steps": done}
                await asyncio.sleep(0.1)
                done += 1
        except asyncio.CancelledError:
            log.info("cancelled after %d of %d steps", done, steps)
            raise
        return {"completed": True, "steps": done}
