"""Every input back as the output of the same number (INPUT0 -> OUTPUT0), datatype and shape
kept: it takes the request itself, so BF16 stays BF16."""

from podium import InferenceRequest, InferenceResponse, ResponseOutput


class Model:
    def predict(self, request: InferenceRequest) -> InferenceResponse:
        return InferenceResponse(
            outputs=[
                ResponseOutput(
                    name=i.name.replace("INPUT", "OUTPUT"),
                    shape=i.shape,
                    datatype=i.datatype,
                    data=i.data,
                )
                for i in request.inputs
            ]
        )
