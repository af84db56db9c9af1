"""Annotated with InferenceRequest: reports how each input's data arrived (binary extension)."""

import json

import numpy as np

from podium import InferenceRequest


def _describe(data):
    if isinstance(data, np.ndarray):
        return {
            "type": "ndarray",
            "dtype": str(data.dtype),
            "shape": list(data.shape),
            "writeable": bool(data.flags.writeable),
            "values": data.ravel().tolist(),
        }
    if isinstance(data, list) and all(isinstance(item, bytes) for item in data):
        return {"type": "list[bytes]", "values": [item.hex() for item in data]}
    return {"type": type(data).__name__, "values": data}


class Model:
    def predict(self, request: InferenceRequest):
        described = {
            inp.name: {
                "datatype": inp.datatype,
                "shape": inp.shape,
                "parameters": inp.parameters,
                "data": _describe(inp.data),
            }
            for inp in request.inputs
        }
        return {"info": json.dumps(described)}
