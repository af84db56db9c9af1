"""An async load that waits until the test creates the file named by PODIUM_E2E_LOAD_GATE."""

import asyncio
import os
import time


class Model:
    async def load(self):
        gate = os.environ["PODIUM_E2E_LOAD_GATE"]
        deadline = time.monotonic() + 30
        while not os.path.exists(gate):  # noqa: ASYNC240 (one stat of a local file)
            if time.monotonic() > deadline:
                raise TimeoutError(f"the test never opened {gate}")
            await asyncio.sleep(0.01)

    def predict(self, inputs):
        return {"loaded": True}
