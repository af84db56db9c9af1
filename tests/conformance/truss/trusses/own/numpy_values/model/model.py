import datetime
import decimal
import uuid

import numpy as np


class Model:
    def predict(self, inputs):
        kind = inputs.get("kind") if isinstance(inputs, dict) else None
        if kind == "array":
            return {"array": np.arange(6, dtype=np.float32).reshape(2, 3)}
        if kind == "scalars":
            return {"i": np.int64(7), "f": np.float64(0.5), "b": np.bool_(True)}
        if kind == "bare":
            return np.array([1, 2, 3], dtype=np.int16)
        if kind == "sum":
            arr = inputs["array"]
            return {"type": type(arr).__name__, "sum": float(np.asarray(arr).sum())}
        if kind == "datetime":
            return {
                "when": datetime.datetime(2024, 5, 6, 7, 8, 9),
                "day": datetime.date(2024, 5, 6),
                "amount": decimal.Decimal("1.50"),
                "id": uuid.UUID("12345678-1234-5678-1234-567812345678"),
            }
        if kind == "non_finite":
            return {"nan": float("nan"), "inf": float("inf"), "np_nan": np.float64("nan")}
        if kind == "set":
            return {"set": {3}}
        if kind == "bytes":
            return {"raw": b"\x00\x01binary"}
        return {"echo": inputs}
