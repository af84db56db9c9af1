"""OUTPUT0 = INPUT0, passed through undecoded (it takes the request itself)."""

from podium import InferenceRequest, InferenceResponse, ResponseOutput


class Model:
    def predict(self, request: InferenceRequest) -> InferenceResponse:
        x = request.inputs[0]
        return InferenceResponse(
            outputs=[
                ResponseOutput(name="OUTPUT0", shape=x.shape, datatype=x.datatype, data=x.data)
            ]
        )
