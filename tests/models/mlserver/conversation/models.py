"""An MLServer runtime whose predict_stream reads a whole stream of requests: each answer counts
the requests it has read so far, so one call reading the stream is visible from the answers."""

from collections.abc import AsyncIterator

from mlserver import MLModel
from mlserver.codecs import StringCodec
from mlserver.types import InferenceRequest, InferenceResponse


class Conversation(MLModel):
    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        text = StringCodec.decode_input(payload.inputs[0])[0]
        return InferenceResponse(
            model_name=self.name, outputs=[StringCodec.encode_output("echo", [text])]
        )

    async def predict_stream(
        self, payloads: AsyncIterator[InferenceRequest]
    ) -> AsyncIterator[InferenceResponse]:
        read = 0
        async for payload in payloads:
            read += 1
            text = StringCodec.decode_input(payload.inputs[0])[0]
            if text == "boom":
                raise ValueError(f"exploded after {read} requests")
            yield InferenceResponse(
                model_name=self.name,
                outputs=[StringCodec.encode_output("echo", [f"{read}:{text}"])],
            )
