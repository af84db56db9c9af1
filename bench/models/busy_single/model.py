"""bench/models/batch_busy's model without batching: the same inputs (decoded numpy arrays), the
same answer with the same parameters, and a wait of its own per request (1 ms + 0.05 ms, the
time one request adds to a batch), so that what a request costs batched and unbatched can be
compared on the same work (bench/instructions.py)."""

import asyncio
import time

from podium import InferenceResponse, ResponseOutput


class Model:
    def __init__(self) -> None:
        self.busy = 0.0
        self.calls = 0

    async def predict(self, inputs: dict) -> InferenceResponse:
        started = time.monotonic()
        await asyncio.sleep(0.00105)
        now = time.monotonic()
        self.busy += now - started
        self.calls += 1
        stats = {"busy_s": self.busy, "at_s": now, "batches": self.calls}
        return InferenceResponse(
            outputs=[
                ResponseOutput(
                    name=name,
                    shape=list(value.shape),
                    datatype="FP32",
                    data=value.ravel().tolist(),
                )
                for name, value in inputs.items()
            ],
            parameters=stats,
        )
