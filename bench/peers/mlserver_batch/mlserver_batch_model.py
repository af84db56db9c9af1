"""MLServer side of bench/peers.py's batching workload (runs in bench/.venvs/mlserver).

MLServer's adaptive batching (``max_batch_size`` 32, ``max_batch_time`` 5 ms in
model-settings.json) joins the requests' ``[1, 4]`` inputs into one ``[n, 4]`` request; the
model sleeps 1 ms + 0.05 ms per item, echoes the input and adds an output ``stats`` of shape
``[n, 3]`` (batches so far, busy seconds, the model's clock), which MLServer splits back, one row
per request.
"""

import asyncio
import sys
import time
from pathlib import Path

from mlserver import MLModel
from mlserver.types import InferenceRequest, InferenceResponse, ResponseOutput

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from common_model import Counters, batch_seconds  # noqa: E402


class BatchModel(MLModel):
    async def load(self) -> bool:
        self.counters = Counters()
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        tensor = payload.inputs[0]
        n = tensor.shape[0]
        started = time.monotonic()
        await asyncio.sleep(batch_seconds(n))
        stats = self.counters.record(started)
        row = [stats["batches"], stats["busy_s"], stats["at_s"]]
        outputs = [
            ResponseOutput(
                name=tensor.name, shape=tensor.shape, datatype=tensor.datatype, data=tensor.data
            ),
            ResponseOutput(name="stats", shape=[n, 3], datatype="FP64", data=row * n),
        ]
        return InferenceResponse(model_name=self.name, id=payload.id, outputs=outputs)
