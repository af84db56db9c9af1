"""A running sum per sequence; its first request begins afresh with the input.

A stateful sequence (``sequence_batching: true``); Podium passes the sequence's ``Context``."""

import numpy as np

from podium import Context


class Model:
    def predict(self, inputs: dict, context: Context) -> dict:
        value = inputs["INPUT"]
        total = value.astype(np.int64) if context.first else context.state["total"] + value
        context.state["total"] = total
        out = total
        return {"OUTPUT": np.asarray(out, dtype=np.int32)}
