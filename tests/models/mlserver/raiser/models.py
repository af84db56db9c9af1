"""Raises what the request's parameter 'raise' names; answers 'ok' otherwise."""

from mlserver import MLModel
from mlserver.codecs import StringCodec
from mlserver.errors import InferenceError, MLServerError, ModelNotFound
from mlserver.types import InferenceRequest, InferenceResponse


class RaiserModel(MLModel):
    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        what = getattr(payload.parameters, "raise", None) if payload.parameters else None
        if what == "value":
            raise ValueError("the runtime refused this request")
        if what == "inference":
            raise InferenceError("the input makes no sense to this runtime")
        if what == "notfound":
            raise ModelNotFound("elsewhere")
        if what == "unavailable":
            raise MLServerError("come back later", status_code=503)
        return InferenceResponse(
            model_name=self.name, outputs=[StringCodec.encode_output("output", ["ok"])]
        )
