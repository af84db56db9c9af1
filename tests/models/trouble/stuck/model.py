"""An async predict that ignores its cancellation (past response_timeout) until its gate opens."""

import asyncio
import sys
from pathlib import Path

_KIT = str(Path(__file__).resolve().parents[2] / "serve" / "_lib")
if _KIT not in sys.path:
    sys.path.insert(0, _KIT)

from e2e_model_kit import plain, record  # noqa: E402

PATIENCE = 20.0


class Model:
    async def predict(self, inputs):
        p = plain(inputs)
        tag, gate = p["tag"], Path(p["gate"])
        record(tag, "started")
        deadline = asyncio.get_running_loop().time() + PATIENCE
        while not gate.exists() and asyncio.get_running_loop().time() < deadline:  # noqa: ASYNC240
            try:
                await asyncio.sleep(0.02)
            except asyncio.CancelledError:
                record(tag, "ignored-cancel")  # what a misbehaving model does
        record(tag, "finished")
        return {"tag": tag}
