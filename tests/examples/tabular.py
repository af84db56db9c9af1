"""What the tabular tests send and expect: the iris rows, OIP bodies and their outputs."""

from __future__ import annotations

from typing import Any

import numpy as np
from example_kit import need

FEATURES = ("sepal_length", "sepal_width", "petal_length", "petal_width")


def iris_rows() -> np.ndarray:
    """All 150 rows of the iris data set (FP64, [150, 4])."""
    datasets = need("sklearn.datasets", "scikit-learn")
    rows: np.ndarray = datasets.load_iris(return_X_y=True)[0]
    return rows


def oip_body(rows: np.ndarray, name: str = "features", **extra: Any) -> dict[str, Any]:
    """An OIP inference request with ``rows`` as one FP64 input (JSON floats round-trip)."""
    tensor = {"name": name, "shape": list(rows.shape), "datatype": "FP64"}
    return {"inputs": [{**tensor, "data": rows.ravel().tolist()}], **extra}


def outputs(answer: dict[str, Any]) -> dict[str, np.ndarray]:
    """An OIP JSON answer's outputs as arrays of their shapes."""
    dtypes = {"FP64": np.float64, "FP32": np.float32, "INT64": np.int64, "INT32": np.int32}
    return {
        o["name"]: np.asarray(o["data"], dtype=dtypes[o["datatype"]]).reshape(o["shape"])
        for o in answer["outputs"]
    }


def records(rows: np.ndarray) -> list[dict[str, float]]:
    """The rows as JSON records, as the native example takes them on the Truss route."""
    return [dict(zip(FEATURES, map(float, row), strict=True)) for row in rows]


def assert_same_probabilities(got: Any, expected: np.ndarray) -> None:
    """Equal to the model's own numbers, to the last bits a different batch may change."""
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), expected, rtol=1e-12, atol=1e-15)
