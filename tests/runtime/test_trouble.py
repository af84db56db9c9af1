"""A version in trouble (``WorkerPool.trouble``): workers lost again and again (crash-looping),
or every worker stuck past ``response_timeout``; the version's readiness says false, with the
reason, in the data plane's readiness and metadata and in the repository's description. Both
clear by themselves."""

from __future__ import annotations

import asyncio
import sys
import textwrap
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from podium.dataplane import DataPlane
from podium.model.discovery import discover_all
from podium.runtime import workers as workers_module
from podium.runtime.loading import build_version
from podium.runtime.registry import ModelVersion, Registry

pytestmark = pytest.mark.anyio

ECHO = "class Model:\n    async def predict(self, x):\n        return x\n"

STUBBORN = textwrap.dedent(
    """
    import asyncio

    RELEASE = asyncio.Event()
    IGNORED = []

    class Model:
        async def predict(self, x):
            while not RELEASE.is_set():
                try:
                    await RELEASE.wait()
                except asyncio.CancelledError:
                    IGNORED.append(x)  # past response_timeout: it goes on regardless
            return x
    """
)


async def wait_until(condition: Callable[[], bool], within: float = 5.0) -> None:
    async with asyncio.timeout(within):
        while not condition():  # noqa: ASYNC110 - plain state, polled
            await asyncio.sleep(0.005)


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(8, thread_name_prefix="test-model") as pool:
        yield pool


def version_from(
    tmp_path: Path, code: str, config: str, executor: ThreadPoolExecutor
) -> ModelVersion:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.py").write_text(code)
    (folder / "config.yaml").write_text(config)
    found, problems = discover_all(folder)
    assert not problems
    return build_version(found[0], secrets={}, executor=executor)


def served(mv: ModelVersion) -> DataPlane:
    registry = Registry()
    registry.add(mv)
    return DataPlane(registry)


async def test_workers_lost_again_and_again_make_the_version_crash_looping(
    tmp_path: Path, executor: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workers_module, "BACKOFF_FIRST", 0.001)
    mv = version_from(tmp_path, ECHO, "", executor)
    await mv.load()
    pool = mv.pool
    assert pool is not None
    dp = served(mv)
    try:
        for n in range(workers_module.RESTART_LIMIT):
            assert mv.trouble() == "", n
            worker = pool._workers[0]
            pool.worker_exited(
                worker, f"worker {worker.id} died: it exited with code 3", crashed=True, lived=0.0
            )
            await wait_until(lambda: pool.counts()["ready_workers"] == 1)
        trouble = mv.trouble()
        assert trouble.startswith("crash-looping: 5 workers lost in the last 60 s (the last: ")
        assert "exited with code 3" in trouble
        assert not dp.model_ready("m") and dp.ready()  # the model's trouble, not the server's
        assert dp.model_metadata("m").parameters["trouble"] == trouble
        (described,) = dp.repository.describe("m")
        assert described.trouble == trouble and not described.ready
        assert await mv.scheduler.infer("still", None) == "still"  # it still takes requests

        # It clears once the window holds fewer losses.
        monkeypatch.setattr(workers_module, "RESTART_WINDOW", 0.05)
        await asyncio.sleep(0.06)
        assert mv.trouble() == "" and dp.model_ready("m")
    finally:
        await mv.close()


async def test_every_worker_stuck_past_response_timeout_is_trouble_until_it_returns(
    tmp_path: Path, executor: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workers_module, "STUCK_GRACE", 0.05)
    mv = version_from(
        tmp_path, STUBBORN, "response_timeout: 0.05\npredict_concurrency: 2\n", executor
    )
    await mv.load()
    model: Any = sys.modules[type(mv.instance.obj).__module__]  # type: ignore[attr-defined]
    dp = served(mv)
    try:
        first = asyncio.ensure_future(mv.scheduler.infer("a", None))
        await wait_until(lambda: model.IGNORED == ["a"])
        await asyncio.sleep(0.1)
        assert mv.trouble() == ""  # one slot of two is stuck: the worker still serves
        second = asyncio.ensure_future(mv.scheduler.infer("b", None))
        await wait_until(lambda: model.IGNORED == ["a", "b"])
        await wait_until(lambda: mv.trouble() != "")
        assert mv.trouble() == (
            "every worker is stuck: 2 call(s) still running more than 0.05 s past response_timeout"
        )
        assert not dp.model_ready("m")
        model.RELEASE.set()
        assert {await first, await second} == {"a", "b"}
        assert mv.trouble() == "" and dp.model_ready("m")
    finally:
        model.RELEASE.set()
        await mv.close()
