"""The twin of Triton's `simple_identity` example model: OUTPUT0 = INPUT0 (BYTES).

Like Podium's `echo` example it takes the request itself and passes the tensor through."""

from podium import InferenceRequest, InferenceResponse, ResponseOutput


class Model:
    def predict(self, request: InferenceRequest) -> InferenceResponse:
        x = request.inputs[0]
        return InferenceResponse(
            outputs=[
                ResponseOutput(name="OUTPUT0", shape=x.shape, datatype=x.datatype, data=x.data)
            ]
        )
