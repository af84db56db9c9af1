"""An OIP model that asks for response headers with the ``headers`` parameter of its response
(MLServer's convention), some of which no protocol can carry: a name with a space, a value with a
line break (header injection), one of gRPC's own names."""

from podium import InferenceRequest, InferenceResponse, ResponseOutput


class Model:
    async def predict(self, request: InferenceRequest) -> InferenceResponse:
        return InferenceResponse(
            outputs=[
                ResponseOutput(name=i.name, shape=i.shape, datatype=i.datatype, data=i.data)
                for i in request.inputs
            ],
            parameters={
                "headers": {
                    "x-answered-by": "answer",
                    "X-Upper": "Case",
                    "bad name": "x",
                    "x-injected": "a\r\nset-cookie: b",
                    "grpc-status": "5",
                },
                "kept": "yes",
            },
        )
