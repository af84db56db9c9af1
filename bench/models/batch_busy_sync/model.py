"""bench/models/batch_busy with a sync ``predict``: the same batches, answers and figures
(``busy_s``, ``at_s``, ``batches`` in each answer's parameters), but the batch's 1 ms + 0.05 ms
per request is a ``time.sleep`` on the model's own thread, as a blocking accelerator call is.
An ``asyncio.sleep`` of 2.6 ms lasts 3 ms or more on uvloop (its timers count whole
milliseconds) and longer still while the server's core is busy (the timer waits for the loop's
turn): this model's ``busy_s`` is the wait itself (bench/RESULTS.md §34)."""

import time

from podium import InferenceResponse, ResponseOutput


class Model:
    def __init__(self) -> None:
        self.busy = 0.0
        self.batches = 0

    def predict(self, batch: list) -> list:
        # each item: the request's inputs by name (numpy arrays)
        started = time.monotonic()
        time.sleep(0.001 + 0.00005 * len(batch))
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
