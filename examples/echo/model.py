"""Echo: returns its Open Inference Protocol inputs as outputs. Podium's benchmark model.

Annotating the parameter with ``InferenceRequest`` asks Podium for the request itself, so the
tensors are passed through without being decoded into arrays and encoded again.
"""

from podium import InferenceRequest, InferenceResponse, ResponseOutput


class Model:
    async def predict(self, request: InferenceRequest) -> InferenceResponse:
        return InferenceResponse(
            outputs=[
                ResponseOutput(
                    name=i.name,
                    shape=i.shape,
                    datatype=i.datatype,
                    data=i.data,
                    parameters=i.parameters,
                )
                for i in request.inputs
            ]
        )
