"""Version 1 of a model with two versions: OUTPUT0 = INPUT0 * 1."""

import numpy as np


class Model:
    def predict(self, inputs: dict) -> dict:
        return {"OUTPUT0": (inputs["INPUT0"] * 1).astype(np.float32)}
