"""A batched sequence model for bench/instructions.py (bench/RESULTS.md §43): each item of a
batch is one request of its own sequence (its Context in ``current_context``'s list, in the
batch's order); the model adds the sum of its inputs to the sequence's running total, waits as
``bench/models/batch_busy`` does (1 ms + 0.05 ms per request, on the event loop) and answers the
inputs back with its total and the batches it has run (``parameters.batches``, which
bench/instructions.py reads for the mean batch size)."""

import asyncio

from podium import InferenceResponse, ResponseOutput
from podium.types import current_context


class Model:
    def __init__(self) -> None:
        self.batches = 0

    async def predict(self, batch: list) -> list:
        contexts = current_context.get()
        await asyncio.sleep(0.001 + 0.00005 * len(batch))
        self.batches += 1
        answers = []
        for context, inputs in zip(contexts, batch, strict=True):
            total = context.state.get("total", 0.0) + sum(float(v.sum()) for v in inputs.values())
            context.state["total"] = total
            answers.append(
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
                    parameters={"total": total, "batches": self.batches},
                )
            )
        return answers
