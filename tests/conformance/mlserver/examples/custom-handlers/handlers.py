"""A runtime with its own REST endpoints (``@custom_handler``), served beside OIP's routes, in
the form MLServer 1.7.1's own tests use (``tests/fixtures.py``; its docs publish no example)."""

from typing import Any

import numpy as np
from fastapi import Body
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.handlers import custom_handler
from mlserver.types import InferenceRequest, InferenceResponse


class SumModel(MLModel):
    async def load(self) -> bool:
        self.calls = 0
        return True

    @custom_handler(rest_path="/sum")
    async def sum_of(self, payload: list = Body(...)) -> int:  # noqa: B008 (FastAPI's form)
        self.calls += 1
        return int(sum(payload))

    @custom_handler(rest_path="/calls", rest_method="GET")
    async def calls_so_far(self) -> dict[str, Any]:
        return {"calls": self.calls, "model": self.name}

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        rows = NumpyCodec.decode_input(payload.inputs[0])
        total = np.asarray(rows).sum(axis=-1, keepdims=True)
        return InferenceResponse(
            model_name=self.name, outputs=[NumpyCodec.encode_output("total", total)]
        )
