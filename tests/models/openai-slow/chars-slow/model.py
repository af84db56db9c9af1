"""tests/models/openai/chars, whose load waits until the test creates the file named by
PODIUM_E2E_LOAD_GATE: OpenAI's routes meanwhile answer 503, not Truss's 404."""

import asyncio
import importlib.util
import os
import time
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "podium_test_openai_chars", Path(__file__).parents[2] / "openai" / "chars" / "model.py"
)
assert _spec is not None and _spec.loader is not None
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)


class Model(_module.Model):
    async def load(self) -> None:
        gate = os.environ["PODIUM_E2E_LOAD_GATE"]
        deadline = time.monotonic() + 30
        while not os.path.exists(gate):  # noqa: ASYNC240 (one stat of a local file)
            if time.monotonic() > deadline:
                raise TimeoutError(f"the test never opened {gate}")
            await asyncio.sleep(0.01)
        super().load()
