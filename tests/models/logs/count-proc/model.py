"""Streams three items from a worker process."""

import numpy as np


class Model:
    def predict(self, inputs):
        for i in range(3):
            yield {"i": np.array([i])}
