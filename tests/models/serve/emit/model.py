"""Returns a value of the kind the request names, to test every row of the outputs table."""

import sys
from pathlib import Path

import numpy as np
from starlette.responses import Response

from podium import InferenceResponse, ResponseOutput

_KIT = str(Path(__file__).resolve().parent.parent / "_lib")
if _KIT not in sys.path:
    sys.path.insert(0, _KIT)

from e2e_model_kit import plain  # noqa: E402


class Opaque:
    pass


def value_of(kind):
    if kind == "response":
        return InferenceResponse(
            outputs=[
                ResponseOutput(name="a", shape=[1], datatype="INT64", data=[7]),
                ResponseOutput(name="b", shape=[2], datatype="FP32", data=[1.5, 2.5]),
            ],
            parameters={"from": "model"},
        )
    if kind == "bytes-tensor":  # BYTES as a Triton python model returns them: bytes
        return InferenceResponse(
            outputs=[
                ResponseOutput(name="y", shape=[2], datatype="BYTES", data=[b"2", b"3"]),
                ResponseOutput(name="n", shape=[1, 2], datatype="BYTES", data=[[b"a", "b"]]),
            ]
        )
    if kind == "badbytes-tensor":
        return InferenceResponse(
            outputs=[ResponseOutput(name="y", shape=[1], datatype="BYTES", data=[b"\xff\x00"])]
        )
    if kind == "dict":
        return {
            "f": np.array([[1.0, 2.0]], dtype=np.float64),
            "i": 3,
            "s": "hi",
            "l": [1, 2, 3],
        }
    if kind == "ndarray":
        return np.arange(6, dtype=np.int32).reshape(2, 3)
    if kind == "list":
        return [1.5, 2.5]
    if kind == "number":
        return 42
    if kind == "float":
        return 0.25
    if kind == "bool":
        return True
    if kind == "str":
        return "héllo wörld"
    if kind == "bytes":
        return b"raw bytes"
    if kind == "badbytes":
        return b"\xff\xfe\x00"
    if kind == "starlette":
        return Response(
            content="made by the model",
            status_code=201,
            headers={"x-made-by": "emit"},
            media_type="text/x-custom",
        )
    if kind == "none":
        return None
    if kind == "nested":
        return {"outer": {"inner": 1}}
    if kind == "ragged":
        return [[1], [1, 2]]
    if kind == "object":
        return Opaque()
    raise ValueError(f"unknown kind {kind!r}")


class Model:
    def predict(self, inputs):
        return value_of(plain(inputs)["kind"])
