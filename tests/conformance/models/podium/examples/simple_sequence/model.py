"""The twin of Triton's `simple_sequence` example model.

A stateful sequence (``sequence_batching: true``); Podium passes the sequence's ``Context``."""

import numpy as np

from podium import Context


class Model:
    def predict(self, inputs: dict, context: Context) -> dict:
        value = inputs["INPUT"]
        # What Triton's example clients expect: the input, plus 1 on a sequence's first request.
        out = value + (1 if context.first else 0)
        return {"OUTPUT": np.asarray(out, dtype=np.int32)}
