"""An async generator: item 0 at once, item 1 once its request's gate opens."""

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
            yield {"tag": tag, "item": 0}
            opened = await await_gate(p["gate"], within=60)
            record(tag, "finished" if opened else "gate-timeout")
            yield {"tag": tag, "item": 1}
        except (asyncio.CancelledError, GeneratorExit) as exc:
            record(tag, "cancelled", exc=type(exc).__name__)
            raise
