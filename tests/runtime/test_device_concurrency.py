"""``predict_concurrency`` per device (docs/devices.md, "One device, one bound"), with four fake
GPUs: workers that share a GPU share its bound (thread and process workers, batches), each
worker keeps its own where ``predict_concurrency_per: worker`` (TorchServe's default), and the
CPU is never shared. Counted, never timed: predicts block until the test lets them go. And
what ran on each GPU, as the statistics extension's ``device_stats`` reports it."""

from __future__ import annotations

import asyncio
import collections
import sys
import textwrap
import threading
import types
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import msgspec
import pytest
from helpers import wait_until

from podium.dataplane._statistics import model_statistics
from podium.model.discovery import discover_all
from podium.model.torchserve._config import model_config
from podium.runtime._device_share import DeviceShares
from podium.runtime._gate import WorkerGate
from podium.runtime.devices import FakeInventory
from podium.runtime.loading import build_version
from podium.runtime.registry import ModelState, ModelVersion
from podium.server._requests import RequestSnapshots

pytest_plugins = ["device_fixtures"]


class Probe:
    """What the model's predicts share with the test (thread workers: one process): how many
    run on each device now and at most, and the event that lets them return."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: collections.Counter[str] = collections.Counter()
        self.most: collections.Counter[str] = collections.Counter()
        self.sizes: list[int] = []
        self.go = threading.Event()

    def enter(self, device: str, size: int) -> None:
        with self.lock:
            self.running[device] += 1
            self.most[device] = max(self.most[device], self.running[device])
            self.sizes.append(size)

    def leave(self, device: str) -> None:
        with self.lock:
            self.running[device] -= 1

    def total(self) -> int:
        with self.lock:
            return sum(self.running.values())


THREAD_MODEL = """
import sys
import podium

class Model:
    def predict(self, inputs):
        probe, device = sys.modules["podium_test_probe"].probe, podium.device()
        probe.enter(device, len(inputs) if isinstance(inputs, list) else 1)
        try:
            probe.go.wait(30)
        finally:
            probe.leave(device)
        return [device] * len(inputs) if isinstance(inputs, list) else device
"""

# A worker process cannot see the test's probe: each predict leaves a file named after its GPU
# while it runs, and answers how many ran on that GPU when it started.
PROCESS_MODEL = """
import os, pathlib, time, uuid

class Model:
    dir = pathlib.Path(PROBE)

    def predict(self, inputs):
        gpu = os.environ["CUDA_VISIBLE_DEVICES"]
        mine = self.dir / f"run-{gpu}-{uuid.uuid4().hex}"
        mine.touch()
        here = len(list(self.dir.glob(f"run-{gpu}-*")))
        try:
            while not (self.dir / "go").exists():
                time.sleep(0.01)
        finally:
            mine.unlink()
        return {"gpu": gpu, "here": here}
"""


@pytest.fixture
def probe(monkeypatch: pytest.MonkeyPatch) -> Iterator[Probe]:
    found = Probe()
    monkeypatch.setitem(sys.modules, "podium_test_probe", types.SimpleNamespace(probe=found))
    yield found
    found.go.set()  # (a failed test lets its predicts end)


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(40, thread_name_prefix="test-model") as pool:
        yield pool


def version_of(
    tmp_path: Path, code: str, config: str, executor: ThreadPoolExecutor
) -> ModelVersion:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.py").write_text(code)
    (folder / "config.yaml").write_text(textwrap.dedent(config))
    found, problems = discover_all(folder)
    assert not problems
    return build_version(found[0], secrets={}, executor=executor, codec=RequestSnapshots())


async def _loaded(mv: ModelVersion) -> AsyncIterator[ModelVersion]:
    await mv.load()
    try:
        assert mv.state is ModelState.READY, mv.reason
        yield mv
    finally:
        await mv.close()


async def _held(mv: ModelVersion, probe: Probe, requests: int, running: int) -> list[Any]:
    """Send ``requests``; once ``running`` predicts run, check that no more start while the
    rest wait in the version's line, then let them all finish."""
    calls = [asyncio.ensure_future(mv.scheduler.infer(i, None)) for i in range(requests)]
    await wait_until(lambda: probe.total() == running, 10.0)
    for _ in range(20):  # the loop turns; nothing more may start
        await asyncio.sleep(0)
    assert probe.total() == running
    probe.go.set()
    return list(await asyncio.gather(*calls))


@pytest.mark.anyio
async def test_thread_workers_on_one_gpu_share_its_predict_concurrency(
    tmp_path: Path, executor: ThreadPoolExecutor, gpus: FakeInventory, probe: Probe
) -> None:
    config = "workers_per_device: 2\npredict_concurrency: 2\n"
    async for mv in _loaded(version_of(tmp_path, THREAD_MODEL, config, executor)):
        assert len(mv.workers()) == 8  # two on each of the four GPUs
        await _held(mv, probe, 40, 8)  # 2 per GPU, not 2 workers × 2
        assert probe.most == {f"cuda:{i}": 2 for i in range(4)}
        pool = mv.pool
        assert pool is not None and pool.gate.shares is not None
        assert [pool.gate.shares.held((i,)) for i in range(4)] == [0, 0, 0, 0]
        assert pool.statistics()["slots"] == 8  # podium_predict_slots: 2 on each GPU
        devices = model_statistics(mv).device_stats
        assert not isinstance(devices, msgspec.UnsetType)
        assert [d.device for d in devices] == [f"cuda:{i}" for i in range(4)]
        assert sum(d.inference_count for d in devices) == 40
        assert all(d.execution_count == d.inference_count > 0 for d in devices)
        assert all(d.compute_infer.count == d.execution_count for d in devices)


@pytest.mark.anyio
async def test_per_worker_keeps_each_workers_own_bound(
    tmp_path: Path, executor: ThreadPoolExecutor, gpus: FakeInventory, probe: Probe
) -> None:
    config = "workers_per_device: 2\npredict_concurrency: 2\npredict_concurrency_per: worker\n"
    async for mv in _loaded(version_of(tmp_path, THREAD_MODEL, config, executor)):
        await _held(mv, probe, 40, 16)  # 2 workers × 2 on each GPU
        assert probe.most == {f"cuda:{i}": 4 for i in range(4)}
        assert mv.pool is not None and mv.pool.statistics()["slots"] == 8 * (2 + 8)  # (ahead)


@pytest.mark.anyio
async def test_one_batch_at_a_time_on_a_gpu_its_two_workers_share(
    tmp_path: Path, executor: ThreadPoolExecutor, gpus: FakeInventory, probe: Probe
) -> None:
    config = "devices: [2]\nworkers_per_device: 2\nbatch_size: 4\nmax_batch_delay: 1\n"
    async for mv in _loaded(version_of(tmp_path, THREAD_MODEL, config, executor)):
        await _held(mv, probe, 12, 1)
        assert probe.most == {"cuda:2": 1}  # one batch at once on the GPU, not one per worker
        assert sum(probe.sizes) == 12 and max(probe.sizes) <= 4
        [on] = model_statistics(mv).device_stats  # type: ignore[misc]
        assert (on.device, on.inference_count) == ("cuda:2", 12)
        assert on.execution_count == len(probe.sizes)


@pytest.mark.anyio
async def test_the_cpu_is_not_shared_each_worker_keeps_its_bound(
    tmp_path: Path, executor: ThreadPoolExecutor, probe: Probe
) -> None:
    config = "devices: cpu\nmin_workers: 2\nmax_workers: 2\n"
    async for mv in _loaded(version_of(tmp_path, THREAD_MODEL, config, executor)):
        await _held(mv, probe, 6, 2)
        assert probe.most == {"cpu": 2}
        assert mv.pool is not None and mv.pool.gate.shares is None
        answer = msgspec.json.decode(msgspec.json.encode(model_statistics(mv)))
        assert "device_stats" not in answer and answer["inference_count"] == 6


@pytest.mark.anyio
async def test_worker_processes_on_one_gpu_share_its_bound(
    tmp_path: Path, executor: ThreadPoolExecutor, gpus: FakeInventory
) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    config = "workers: process\ndevices: [1, 3]\nworkers_per_device: 2\n"
    code = PROCESS_MODEL.replace("PROBE", repr(str(runs)))
    async for mv in _loaded(version_of(tmp_path, code, config, executor)):
        assert sorted(w.devices for w in mv.workers()) == [(1,), (1,), (3,), (3,)]
        calls = [asyncio.ensure_future(mv.scheduler.infer(i, None)) for i in range(12)]
        await wait_until(lambda: len(list(runs.glob("run-*"))) == 2, 20.0)
        pool = mv.pool
        assert pool is not None and pool.gate.shares is not None
        assert [pool.gate.shares.held((g,)) for g in (1, 3)] == [1, 1]
        assert pool.gate.waiting == 10  # the rest wait here, not ahead in the workers
        (runs / "go").touch()
        answers = await asyncio.gather(*calls)
        assert {a["here"] for a in answers} == {1}  # never two at once on one GPU
        assert sorted({a["gpu"] for a in answers}) == ["1", "3"]
        # what each process ran, from its reports to the server
        stats = mv.stats.by_device
        await wait_until(lambda ran=stats: sum(c.inferences for c in ran.values()) == 12, 10.0)
        assert sorted(stats) == ["cuda:1", "cuda:3"]
        assert all(c.predict.count == c.inferences > 0 and c.predict.ns > 0 for c in stats.values())


class _W:
    def __init__(self, devices: tuple[int, ...]) -> None:
        self.devices, self.busy, self.capacity = devices, 0, 1


def test_the_shares_count_only_gpus_and_bind_where_two_workers_meet() -> None:
    a, b, c, cpu = _W((0,)), _W((0,)), _W((1,)), _W(())
    takers = [a, b, c, cpu]
    shares = DeviceShares(1, lambda: takers)
    assert shares.room(cpu, takers) and shares.room(c, takers)
    a.busy += 1
    assert not shares.room(b, takers) and not shares.room(a, takers)  # one on GPU 0, a and b's
    c.busy += 1
    assert shares.room(c, takers)  # alone on GPU 1: its own bound only
    a.capacity = b.capacity = c.capacity = cpu.capacity = 3
    assert shares.slots(takers) == 1 + 3 + 3  # GPU 0's limit, c's own, the CPU's
    takers.remove(b)
    assert shares.room(a, takers)  # a alone on GPU 0 now
    a.busy -= 1
    assert shares.held((0,)) == 0
    with pytest.raises(ValueError, match="at least 1"):
        DeviceShares(0, lambda: ())


@pytest.mark.anyio
async def test_a_leaving_workers_calls_count_on_its_gpu_until_they_end() -> None:
    old, new, other = _W((0,)), _W((0,)), _W((0,))
    holders = [old, new, other]
    gate = WorkerGate("m", 10)
    gate.shares = DeviceShares(1, lambda: holders)
    for w in holders:
        gate.add(w)
    assert gate.try_acquire() is old
    gate.remove(old)  # replaced while its call runs on the GPU
    assert gate.try_acquire() is None and gate.shares.held((0,)) == 1
    waiter = asyncio.ensure_future(gate.acquire())
    await asyncio.sleep(0)
    gate.release(old)  # its call ended: the least loaded of the others is woken
    assert await waiter in (new, other) and gate.shares.held((0,)) == 1


def test_torchserve_models_keep_per_worker_unless_their_podium_section_says() -> None:
    def read(data: dict[str, Any]) -> str:
        config = model_config(data, name="m", version=None, where="model-config.yaml")
        return config.predict_concurrency_per

    assert read({"minWorkers": 2, "deviceType": "gpu"}) == "worker"
    assert read({"deviceType": "gpu", "podium": {"predict_concurrency_per": "device"}}) == "device"
