"""Closing schedulers and registering models: nothing hangs, nothing runs twice."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from podium.config import ModelConfig
from podium.errors import DefinitionError, Unavailable
from podium.model.native import NativeModel, inspect_class
from podium.runtime.direct import DirectScheduler
from podium.runtime.loading import register_paths
from podium.runtime.registry import Registry


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(4) as pool:
        yield pool


@pytest.mark.anyio
async def test_closing_a_direct_scheduler_fails_its_readers_instead_of_hanging(
    executor: ThreadPoolExecutor,
) -> None:
    started = asyncio.Event()

    class Model:
        async def predict(self, inputs):
            yield 1
            started.set()
            await asyncio.Event().wait()  # never finishes on its own
            yield 2

    instance = NativeModel(
        inspect_class(Model),
        ModelConfig(name="m"),
        model_dir=Path("."),
        secrets={},
        executor=executor,
    )
    scheduler = DirectScheduler(instance, model="m", concurrency=1, max_queue_size=10)
    received: list[object] = []

    async def read() -> None:
        async for item in scheduler.stream(None, None):
            received.append(item)

    reader = asyncio.create_task(read())
    await started.wait()
    await scheduler.close()
    with pytest.raises(Unavailable, match="model 'm' was unloaded"):
        await asyncio.wait_for(reader, 5)
    assert received == [1]


def test_register_paths_imports_each_model_file_once(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    counter = tmp_path / "imports.txt"
    model = tmp_path / "counted"
    model.mkdir()
    (model / "model.py").write_text(
        f"with open({str(counter)!r}, 'a') as f:\n    f.write('x')\n\n"
        "class Model:\n    def predict(self, inputs):\n        return inputs\n"
    )
    registry = Registry()
    register_paths(registry, [model], secrets={}, executor=executor)
    assert counter.read_text() == "x"
    assert [mv.name for mv in registry] == ["counted"]


def test_register_paths_registers_nothing_when_one_init_fails(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    for name, body in {
        "good": "class Model:\n    def predict(self, x):\n        return x\n",
        "bad": "class Model:\n    def __init__(self):\n        raise RuntimeError('boom')\n"
        "    def predict(self, x):\n        return x\n",
    }.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.py").write_text(body)
    registry = Registry()
    with pytest.raises(DefinitionError, match="model 'bad'.*RuntimeError: boom"):
        register_paths(registry, [tmp_path], secrets={}, executor=executor)
    assert list(registry) == []
