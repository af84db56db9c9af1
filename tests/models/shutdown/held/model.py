"""An async predict that waits for its request's gate (a file), then answers its tag."""

import asyncio
import sys
from pathlib import Path

_KIT = str(Path(__file__).resolve().parents[2] / "serve" / "_lib")
if _KIT not in sys.path:
    sys.path.insert(0, _KIT)

from e2e_model_kit import await_gate, plain, record  # noqa: E402


class Model:
    async def predict(self, inputs):
        p = plain(inputs)
        tag = p["tag"]
        record(tag, "started")
        try:
            opened = await await_gate(p["gate"], within=60)
        except asyncio.CancelledError:
            record(tag, "cancelled")
            raise
        record(tag, "finished" if opened else "gate-timeout")
        return {"tag": tag}
