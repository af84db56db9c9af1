"""A model whose contract has an unload hook (an MLServer runtime's ``unload()``) gets it called
when its version is removed from the registry, in the server process and in worker processes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from helpers import wait_until

from podium.runtime.loading import build_path
from podium.runtime.registry import ModelState, Registry

RUNTIME = """
from pathlib import Path
from mlserver import MLModel
from mlserver.codecs import StringCodec
from mlserver.types import InferenceResponse


class Runtime(MLModel):
    async def load(self):
        return True

    async def predict(self, payload):
        return InferenceResponse(model_name=self.name, outputs=[StringCodec.encode_output("y", ["ok"])])

    async def unload(self):
        Path(self.settings.parameters.extra["mark"]).write_text("unloaded")
        return True
"""


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(2) as pool:
        yield pool


@pytest.mark.anyio
@pytest.mark.parametrize("workers", ["thread", "process"])
async def test_removing_a_version_runs_the_runtimes_unload(
    tmp_path: Path, executor: ThreadPoolExecutor, workers: str
) -> None:
    mark = tmp_path / "unloaded.txt"
    model = tmp_path / "unloading"
    model.mkdir()
    (model / "models.py").write_text(RUNTIME)
    settings = {
        "name": "unloading",
        "implementation": "models.Runtime",
        "parameters": {"extra": {"mark": str(mark)}},
    }
    if workers == "process":
        settings["parallel_workers"] = 1
    (model / "model-settings.json").write_text(json.dumps(settings))
    registry = Registry()
    (mv,) = build_path(model, {}, secrets={}, executor=executor)
    registry.add(mv)
    await mv.load()
    assert mv.state is ModelState.READY, mv.reason
    try:
        assert not mark.exists()
        await registry.remove("unloading")
        await wait_until(mark.exists, 10, every=0.02)  # a worker process runs it as it exits
        assert mark.read_text() == "unloaded"
    finally:
        await registry.close()
