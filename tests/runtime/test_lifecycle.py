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


def _versioned(root: Path, shared: str, versions: dict[str, str]) -> Path:
    model = root / "multi"
    model.mkdir()
    (model / "config.yaml").write_text(shared)
    for version, own in versions.items():
        (model / version).mkdir()
        (model / version / "model.py").write_text(
            "class Model:\n    def predict(self, x):\n        return x\n"
        )
        if own:
            (model / version / "config.yaml").write_text(own)
    return model


def test_default_version_from_the_shared_config(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    model = _versioned(tmp_path, "default_version: 2\n", {"1": "", "2": "", "10": ""})
    registry = Registry()
    register_paths(registry, [model], secrets={}, executor=executor)
    assert registry.get("multi").version == "2"  # not the highest, "10"


def test_without_default_version_the_highest_is_the_default(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    model = _versioned(tmp_path, "", {"1": "", "2": "", "10": ""})
    registry = Registry()
    register_paths(registry, [model], secrets={}, executor=executor)
    assert registry.get("multi").version == "10"


def test_default_version_that_does_not_exist_is_a_definition_error(tmp_path: Path) -> None:
    from podium.runtime.loading import check_paths

    model = _versioned(tmp_path, "default_version: 3\n", {"1": "", "2": ""})
    problems = check_paths([model])
    assert problems == ["model 'multi': default_version '3' is not one of its versions (1, 2)"]


def test_conflicting_default_versions_are_a_definition_error(tmp_path: Path) -> None:
    from podium.runtime.loading import check_paths

    model = _versioned(tmp_path, "", {"1": "default_version: 1\n", "2": "default_version: 2\n"})
    problems = check_paths([model])
    assert len(problems) == 1 and "default_version is set to both '1' and '2'" in problems[0]
