"""An MLServer runtime recording metrics through mlserver.register / mlserver.log."""

import mlserver
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse, RequestOutput


class Counting(MLModel):
    async def load(self) -> bool:
        mlserver.register("mls_rows", "Rows per request")
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        value = self.decode(payload.inputs[0], default_codec=NumpyCodec)
        mlserver.log(mls_rows=len(value), mls_unregistered=2)
        return InferenceResponse(
            model_name=self.name, outputs=[self.encode(value, RequestOutput(name="echo"))]
        )
