"""The registry: podium.runtime.registry (versions, default version, readiness, loading)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from helpers import all_ready

from podium.config import ModelConfig
from podium.errors import ModelNotReady, NotFound, PodiumError, Unavailable, http_status
from podium.model.native import NativeModel, inspect_class
from podium.runtime.direct import DirectScheduler
from podium.runtime.registry import ModelState, ModelVersion, Registry, version_key


class FakeInstance:
    def __init__(self, fail: BaseException | None = None) -> None:
        self.fail = fail
        self.loaded = 0

    async def load(self) -> None:
        self.loaded += 1
        if self.fail is not None:
            raise self.fail


class FakeScheduler:
    def __init__(self) -> None:
        self.started = 0
        self.closed = 0

    async def start(self) -> None:
        self.started += 1

    async def close(self) -> None:
        self.closed += 1


def version(
    name: str, v: str | None, *, state: ModelState = ModelState.READY, fail: Exception | None = None
) -> ModelVersion:
    mv = ModelVersion(
        ModelConfig(name=name, version=v),
        FakeInstance(fail),  # type: ignore[arg-type]
        FakeScheduler(),  # type: ignore[arg-type]
        source=f"/models/{name}/{v}",
    )
    mv.state = state
    return mv


def registry_of(*versions: ModelVersion) -> Registry:
    registry = Registry()
    for mv in versions:
        registry.add(mv)
    return registry


def test_version_key_is_numeric_aware() -> None:
    ordered = [None, "1", "2", "9", "10", "10.1", "10.2", "10.10", "11"]
    assert sorted(reversed(ordered), key=version_key) == ordered
    assert version_key("1.10") > version_key("1.9")
    assert version_key("2-rc1") > version_key("2")
    # letters and digits mixed in one version never fail to compare
    assert sorted(["b", "2", "a", "10"], key=version_key) == ["2", "10", "a", "b"]
    # digits int() refuses ("²" is a digit to str.isdigit; 5,000 digits pass int's limit)
    huge = "9" * 5000
    assert sorted([huge, "²", "3"], key=version_key) == ["3", huge, "²"]


def test_default_is_the_highest_version() -> None:
    registry = registry_of(*(version("m", v) for v in ("9", "10", "2", "1")))
    assert registry.default_version("m").version == "10"
    assert registry.get("m").version == "10"
    assert registry.get("m", None).version == "10"
    assert registry.get("m", "").version == "10"
    assert [mv.version for mv in registry.versions("m")] == ["1", "2", "9", "10"]


def test_unversioned_model_sorts_below_versions() -> None:
    registry = registry_of(version("m", None), version("m", "1"))
    assert registry.get("m").version == "1"
    assert registry_of(version("solo", None)).get("solo").version is None


def test_get_a_specific_version() -> None:
    v2 = version("m", "2")
    registry = registry_of(version("m", "1"), v2, version("other", "2"))
    assert registry.get("m", "2") is v2
    assert registry.names() == ["m", "other"]
    assert sorted((mv.name, mv.version) for mv in registry) == [
        ("m", "1"),
        ("m", "2"),
        ("other", "2"),
    ]


def test_set_default_overrides_the_highest() -> None:
    registry = registry_of(version("m", "1"), version("m", "2"), version("m", "10"))
    registry.set_default("m", "2")
    assert registry.get("m").version == "2"
    assert registry.get("m", "10").version == "10"
    registry.set_default("m", "10")
    assert registry.get("m").version == "10"


def test_set_default_to_an_unknown_version() -> None:
    registry = registry_of(version("m", "1"))
    with pytest.raises(NotFound, match="Request for unknown model: 'm' version 7 is not found"):
        registry.set_default("m", "7")
    assert registry.get("m").version == "1"


def test_unknown_model() -> None:
    registry = registry_of(version("m", "1"))
    with pytest.raises(NotFound) as info:
        registry.get("nope")
    assert info.value.message == "Request for unknown model: 'nope' is not found"
    assert http_status(info.value) == 404
    with pytest.raises(NotFound) as info:
        registry.get("nope", "3")
        assert info.value.message == "Request for unknown model: 'nope' is not found"  # as Triton
    with pytest.raises(NotFound, match="Request for unknown model: 'nope' is not found"):
        registry.versions("nope")


def test_unknown_version_lists_the_known_ones() -> None:
    registry = registry_of(version("m", "10"), version("m", "9"), version("m", None))
    with pytest.raises(NotFound) as info:
        registry.get("m", "3")
    message = info.value.message
    assert message.startswith("Request for unknown model: 'm' version 3 is not found")
    assert "(versions: 1 (unversioned), 9, 10)" in message


def test_an_unversioned_model_answers_to_version_1() -> None:
    solo = version("solo", None)
    registry = registry_of(solo, version("named", "a"), version("named", "b"))
    assert registry.get("solo", "1") is solo
    assert registry.ready("solo", "1") is solo
    with pytest.raises(NotFound, match=r"version 2 is not found \(versions: 1 \(unversioned\)\)"):
        registry.get("solo", "2")
    # A versioned model's "1" is only a version named "1": here there is none.
    with pytest.raises(
        NotFound,
        match=r"Request for unknown model: 'named' version 1 is not found \(versions: a, b\)",
    ):
        registry.get("named", "1")
    # Set-default, by "1", keeps the one version the default.
    registry.set_default("solo", "1")
    assert registry.get("solo") is solo


def test_adding_the_same_version_twice() -> None:
    registry = registry_of(version("m", "1"))
    with pytest.raises(PodiumError) as info:
        registry.add(version("m", "1"))
    assert "model 'm' version '1' is registered twice" in info.value.message
    assert "/models/m/1" in info.value.message


@pytest.mark.parametrize(
    ("state", "reason", "fragment"),
    [
        (ModelState.LOADING, "", "model 'm' version '2' is not ready: it is still loading"),
        (
            ModelState.FAILED,
            "load() raised OSError: disk",
            "model 'm' version '2' is not ready: load() raised OSError: disk",
        ),
    ],
)
def test_not_ready(state: ModelState, reason: str, fragment: str) -> None:
    mv = version("m", "2", state=state)
    mv.reason = reason
    registry = registry_of(version("m", "1"), mv)
    assert registry.get("m") is mv  # get() does not care about readiness
    with pytest.raises(ModelNotReady) as info:
        registry.ready("m")
    assert info.value.message == fragment
    assert isinstance(info.value, Unavailable) and http_status(info.value) == 503
    assert registry.ready("m", "1").version == "1"


def test_all_ready() -> None:
    loading = version("m", "2", state=ModelState.LOADING)
    registry = registry_of(version("m", "1"), loading, version("x", None))
    assert not all_ready(registry)
    loading.state = ModelState.READY
    assert all_ready(registry)
    loading.state = ModelState.FAILED
    assert not all_ready(registry)


@pytest.mark.anyio
async def test_load_all_records_failures_and_loads_the_rest() -> None:
    good = version("good", "1", state=ModelState.LOADING)
    bad = version("bad", "1", state=ModelState.LOADING, fail=RuntimeError("no GPU"))
    done = version("done", "1", state=ModelState.READY)
    registry = registry_of(good, bad, done)
    await registry.load_all()
    assert good.state is ModelState.READY and good.reason == ""
    assert bad.state is ModelState.FAILED
    assert bad.reason == "load() raised RuntimeError: no GPU"
    assert done.instance.loaded == 0  # type: ignore[attr-defined]  # already loaded: not again
    assert good.scheduler.started == 1  # type: ignore[attr-defined]
    assert bad.scheduler.started == 0  # type: ignore[attr-defined]
    with pytest.raises(ModelNotReady, match="no GPU"):
        registry.ready("bad")
    assert registry.ready("good") is good
    await registry.close()
    assert all(mv.scheduler.closed == 1 for mv in registry)  # type: ignore[attr-defined]


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(4) as pool:
        yield pool


@pytest.mark.anyio
async def test_load_all_with_native_models(executor: ThreadPoolExecutor) -> None:
    calls: list[str] = []

    class Good:
        def load(self) -> None:
            calls.append("good")

        def predict(self, inputs: Any) -> Any:
            return inputs

    class Bad:
        async def load(self) -> None:
            raise ValueError("checksum mismatch")

        def predict(self, inputs: Any) -> Any:
            return inputs

    registry = Registry()
    for cls in (Good, Bad):
        config = ModelConfig(name=cls.__name__.lower())
        instance = NativeModel(
            inspect_class(cls), config, model_dir=Path("."), secrets={}, executor=executor
        )
        scheduler = DirectScheduler(instance, model=config.name, concurrency=1, max_queue_size=1)
        registry.add(ModelVersion(config, instance, scheduler))
    await registry.load_all()
    assert calls == ["good"]
    assert registry.get("good").state is ModelState.READY
    assert registry.get("bad").state is ModelState.FAILED
    assert registry.get("bad").reason == "load() raised ValueError: checksum mismatch"
    assert await registry.ready("good").scheduler.infer(5, None) == 5
    await registry.close()
