"""Version 2: both versions' files are called models.py; each must get its own."""

from mlserver import MLModel
from mlserver.codecs import StringCodec
from mlserver.types import InferenceResponse

WHICH = "version 2"


class Versioned(MLModel):
    async def load(self):
        pass  # returns None: older runtimes do not return True

    async def predict(self, payload):
        return InferenceResponse(
            model_name=self.name, outputs=[StringCodec.encode_output("which", [WHICH])]
        )
