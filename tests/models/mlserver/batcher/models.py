"""Adaptive batching: doubles 'x' and reports how many rows the merged request had."""

import numpy as np
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse


class BatchModel(MLModel):
    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        x = NumpyCodec.decode_input(payload.inputs[0])
        rows = x.shape[0]
        return InferenceResponse(
            model_name=self.name,
            outputs=[
                NumpyCodec.encode_output("doubled", x * 2),
                NumpyCodec.encode_output("rows", np.full((rows, 1), rows, dtype=np.int64)),
            ],
        )
