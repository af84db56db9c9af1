"""The dynamic-batching benchmark's model: a batch takes 1 ms + 0.05 ms per request (an
accelerator's time: it waits, the event loop serves meanwhile), and the model measures how busy
it is. Every answer carries, in its parameters, the seconds it has spent in ``predict`` so far
(``busy_s``), its clock (``at_s``) and the batches it ran (``batches``): bench/run.py reads them before and after a run, so the
share of the time the model was busy comes from the model itself."""

import asyncio
import time

from podium import InferenceResponse, ResponseOutput


class Model:
    def __init__(self) -> None:
        self.busy = 0.0
        self.batches = 0

    async def predict(self, batch: list) -> list:
        # each item: the request's inputs by name (numpy arrays)
        started = time.monotonic()
        await asyncio.sleep(0.001 + 0.00005 * len(batch))
        now = time.monotonic()
        self.busy += now - started
        self.batches += 1
        stats = {"busy_s": self.busy, "at_s": now, "batches": self.batches}
        return [
            InferenceResponse(
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
            for inputs in batch
        ]
