"""MLServer's side of the streaming benchmark: `predict_stream` yields N InferenceResponses.

N comes from the request's INT64 input "n" (default 1000). Each response carries one INT64
output "output" holding the item's index: the same items Podium's bench/models/stream1000
yields. Runs inside MLServer's own virtual env (bench/.venvs/mlserver).
"""

from collections.abc import AsyncIterator

from mlserver import MLModel
from mlserver.types import InferenceRequest, InferenceResponse, ResponseOutput

DEFAULT_N = 1000


def _count(payload: InferenceRequest) -> int:
    for tensor in payload.inputs:
        if tensor.name == "n":
            data = tensor.data.root if hasattr(tensor.data, "root") else tensor.data
            while isinstance(data, list):
                data = data[0]
            return int(data)  # type: ignore[arg-type]
    return DEFAULT_N


class StreamModel(MLModel):
    async def load(self) -> bool:
        return True

    async def predict_stream(
        self, payloads: AsyncIterator[InferenceRequest]
    ) -> AsyncIterator[InferenceResponse]:
        async for payload in payloads:
            for i in range(_count(payload)):
                yield InferenceResponse(
                    model_name=self.name,
                    outputs=[ResponseOutput(name="output", shape=[1], datatype="INT64", data=[i])],
                )
