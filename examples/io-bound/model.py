"""A slow preprocess (standing for a download) in front of a fast predict.

preprocess is sync, so it runs in Podium's thread pool, outside ``predict_concurrency``: ten
requests download at once while at most five predicts run.
"""

import time


class Model:
    def preprocess(self, inputs):
        time.sleep(0.2)  # the "download"
        return inputs

    def predict(self, inputs):
        text = inputs.get("url", "") if isinstance(inputs, dict) else str(inputs)
        return {"length": len(text)}
