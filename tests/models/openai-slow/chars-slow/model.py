"""tests/models/openai/chars, whose load first waits as tests/models/slow-load/slow's does
(until the test creates the file named by PODIUM_E2E_LOAD_GATE): OpenAI's routes meanwhile
answer 503, not Truss's 404."""

import importlib.util
from pathlib import Path
from typing import Any


def _sibling(name: str, path: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, Path(__file__).parents[2] / path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_chars = _sibling("podium_test_openai_chars", "openai/chars/model.py")
_slow = _sibling("podium_test_slow_load", "slow-load/slow/model.py")


class Model(_chars.Model):
    async def load(self) -> None:
        await _slow.Model.load(self)  # the gate
        super().load()
