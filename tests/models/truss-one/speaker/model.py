"""The one model of a server (Truss's routes reach it whatever name they give): answers as its
input's "kind" asks, for tests/server/test_http_truss.py."""

from typing import Any

import numpy as np
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse


class Model:
    def predict(self, inputs: Any) -> Any:
        kind = inputs.get("kind") if isinstance(inputs, dict) else None
        if kind == "http":
            raise HTTPException(status_code=418, detail="I am a teapot")
        if kind == "http-dict":  # a detail that is no string (Truss's chains send such)
            raise HTTPException(status_code=422, detail={"field": "x", "why": "odd"})
        if kind == "fail":
            raise ValueError("the secret reason")
        if kind == "object":
            return {"x": object()}
        if kind == "array":
            return {"array": np.arange(4, dtype=np.int64).reshape(2, 2), "x": inputs.get("x")}
        if kind == "conflict":
            return JSONResponse({"why": "taken"}, status_code=409)
        return inputs
