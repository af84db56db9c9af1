"""The iris classifier (a scikit-learn pipeline saved with joblib by train.py), batched.

- OIP: input ``features``, FP64 ``[n, 4]`` (sepal length, sepal width, petal length, petal
  width, in cm); outputs ``predict`` (INT64 ``[n]``, the class index) and ``predict_proba``
  (FP64 ``[n, 3]``), what the pipeline's methods of those names return.
- Truss (``/v1/models/sklearn-iris:predict``) and TorchServe (``/predictions/sklearn-iris``):
  JSON records, ``[{"sepal_length": 5.1, "sepal_width": 3.5, "petal_length": 1.4,
  "petal_width": 0.2}, ...]`` (or one record); the answer is the same two outputs as JSON.

``preprocess`` turns each request into a float64 matrix (outside the predict slot; a bad
request fails alone, with a 400), ``predict`` gets the batch's matrices, scores their rows in one
call of each method and gives each request its own rows back.
"""

from pathlib import Path

import numpy as np

import podium

FEATURES = ("sepal_length", "sepal_width", "petal_length", "petal_width")


class Model:
    def __init__(self, data_dir):  # this folder's data/, where train.py saves the pipeline
        self._path = Path(data_dir) / "model.joblib"
        self._pipeline = None

    def load(self):
        import joblib  # here, not at import: `podium serve` binds before models load

        if not self._path.is_file():
            raise FileNotFoundError(
                f"{self._path} does not exist: train it with "
                f"'python {self._path.parent.parent / 'train.py'}' (python3 dev.py serve does)"
            )
        self._pipeline = joblib.load(self._path)

    def preprocess(self, inputs):
        if isinstance(inputs, dict) and "features" in inputs:  # OIP, checked against metadata
            return np.asarray(inputs["features"], dtype=np.float64)
        records = [inputs] if isinstance(inputs, dict) else inputs
        if not isinstance(records, list) or not records:
            raise podium.InvalidInput(
                "send OIP input 'features' (FP64 [n, 4]) or JSON records "
                f"(a list of objects with the keys {', '.join(FEATURES)})"
            )
        try:
            rows = [[float(record[name]) for name in FEATURES] for record in records]
        except (KeyError, TypeError, ValueError) as exc:
            raise podium.InvalidInput(
                f"each record needs the numbers {', '.join(FEATURES)} ({type(exc).__name__}: {exc})"
            ) from None
        return np.asarray(rows, dtype=np.float64)

    def predict(self, batch):
        rows = np.concatenate(batch) if len(batch) > 1 else batch[0]
        labels = self._pipeline.predict(rows)
        probabilities = self._pipeline.predict_proba(rows)
        answers, start = [], 0
        for matrix in batch:
            end = start + len(matrix)
            answers.append(
                {
                    "predict": labels[start:end].astype(np.int64),
                    "predict_proba": probabilities[start:end],
                }
            )
            start = end
        return answers
