"""MLServer's side of the echo benchmark: an MLModel that returns its inputs as its outputs.

Runs inside MLServer's own virtual env (bench/.venvs/mlserver), never in Podium's.
"""

from mlserver import MLModel
from mlserver.types import InferenceRequest, InferenceResponse, ResponseOutput


class EchoModel(MLModel):
    async def load(self) -> bool:
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        outputs = [
            ResponseOutput(
                name=tensor.name,
                shape=tensor.shape,
                datatype=tensor.datatype,
                data=tensor.data,
                parameters=tensor.parameters,
            )
            for tensor in payload.inputs
        ]
        return InferenceResponse(model_name=self.name, id=payload.id, outputs=outputs)
