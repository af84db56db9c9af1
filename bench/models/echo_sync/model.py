"""Echo with a plain ``def predict``: the benchmark's sync model (the same work as
examples/echo, whose predict is ``async def``), so the two rows differ only by the hand-off to a
thread and back."""

from podium import InferenceRequest, InferenceResponse, ResponseOutput


class Model:
    def predict(self, request: InferenceRequest) -> InferenceResponse:
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
