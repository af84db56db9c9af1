"""Triton's `simple` example model: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1,
element-wise, in the inputs' dtype. It records whether INPUT0 reached it as a read-only view
(``OUTPUT0`` carries no such flag: the test reads ``readonly`` from a third output)."""

import numpy as np


class Model:
    def predict(self, inputs: dict) -> dict:
        a, b = inputs["INPUT0"], inputs["INPUT1"]
        return {
            "OUTPUT0": (a + b).astype(a.dtype),
            "OUTPUT1": (a - b).astype(a.dtype),
            "VIEW": np.array([not a.flags.writeable, not a.flags.owndata], dtype=bool),
        }
