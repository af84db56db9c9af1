"""An MLServer runtime, exactly as MLServer runs it: the text model that streams words.

``predict`` answers with the whole prompt; ``predict_stream`` with one response per word. Nothing
here knows about Podium: the imports are MLServer's (Podium provides them when MLServer is not
installed). Try it with ``python3 dev.py serve``:

    curl -sN localhost:8080/v2/models/mlserver-text/infer_stream -d '{"inputs": [{"name": "prompt",
      "shape": [1], "datatype": "BYTES", "data": ["What is the capital of France?"],
      "parameters": {"content_type": "str"}}]}'
"""

import asyncio
from collections.abc import AsyncIterator

from mlserver import MLModel
from mlserver.codecs import StringCodec
from mlserver.types import InferenceRequest, InferenceResponse


class TextModel(MLModel):
    async def load(self) -> bool:
        extra = self.settings.parameters.extra or {}
        self.delay = float(extra.get("delay_s", 0.5))
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        text = StringCodec.decode_input(payload.inputs[0])[0]
        return InferenceResponse(
            model_name=self.name,
            model_version=self.version,
            outputs=[StringCodec.encode_output(name="output", payload=[text], use_bytes=True)],
        )

    async def predict_stream(
        self, payloads: AsyncIterator[InferenceRequest]
    ) -> AsyncIterator[InferenceResponse]:
        payload = [p async for p in payloads][0]
        text = StringCodec.decode_input(payload.inputs[0])[0]
        for i, word in enumerate(text.split(" ")):
            await asyncio.sleep(self.delay)
            yield InferenceResponse(
                model_name=self.name,
                model_version=self.version,
                outputs=[
                    StringCodec.encode_output(
                        name="output", payload=[word if i == 0 else " " + word], use_bytes=True
                    )
                ],
            )
