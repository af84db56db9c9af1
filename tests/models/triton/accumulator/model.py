"""The running sum of a sequence's INPUT values."""

import numpy as np

from podium import Context


class Model:
    def predict(self, inputs: dict, context: Context) -> dict:
        total = context.state.get("total", 0) + int(inputs["INPUT"].ravel()[0])
        context.state["total"] = total
        return {"OUTPUT": np.array([[total]], dtype=np.int32)}
