"""Version 2 of a model with two versions: OUTPUT0 = INPUT0 * 2."""

import numpy as np


class Model:
    def predict(self, inputs: dict) -> dict:
        return {"OUTPUT0": (inputs["INPUT0"] * 2).astype(np.float32)}
