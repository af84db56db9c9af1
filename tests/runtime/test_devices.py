"""Devices (docs/devices.md), with four fake GPUs: discovery, placement, assignment, each
worker's device (thread workers: podium.device(); worker processes: CUDA_VISIBLE_DEVICES),
restarts keeping devices, impossible requests, out-of-memory errors and lost devices. Nothing
here needs a GPU."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import sys
import textwrap
import types
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_until

import podium
from podium.config import ModelConfig
from podium.devices import (
    device,
    empty_cache,
    gpu_index,
    is_device_lost,
    is_out_of_memory,
    using,
)
from podium.errors import DefinitionError, DeviceLost, DeviceOutOfMemory, grpc_code, http_status
from podium.model._calls import model_error
from podium.model.discovery import discover_all
from podium.runtime import devices as devices_module
from podium.runtime._stats import RestartReason
from podium.runtime.devices import (
    DeviceAssigner,
    FakeInventory,
    NoInventory,
    NvmlInventory,
    assigner_for,
    discover,
    resolve,
)
from podium.runtime.loading import build_version
from podium.runtime.registry import ModelState, ModelVersion
from podium.server._requests import RequestSnapshots

FOUR = FakeInventory(4)

pytest_plugins = ["device_fixtures"]


@pytest.fixture
def no_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(devices_module, "_inventory", NoInventory("no GPU here"))


@pytest.fixture
def torch_cache(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """A stand-in for torch (only ``torch.cuda``'s cache calls); one entry per emptying."""
    emptied: list[bool] = []
    cuda = types.SimpleNamespace(
        is_available=lambda: True,
        is_initialized=lambda: True,
        empty_cache=lambda: emptied.append(True),
    )
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    return emptied


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(8, thread_name_prefix="test-model") as pool:
        yield pool


# -- placement -----------------------------------------------------------------------------------


def placed(devices: Any = "auto", per: int = 1) -> ModelConfig:
    """A model's config asking for ``devices``, ``per`` GPUs to a worker."""
    return ModelConfig(name="m", devices=devices, devices_per_worker=per)


def test_auto_takes_every_gpu_one_per_worker() -> None:
    assert resolve(placed(), FOUR, "m") == ((0,), (1,), (2,), (3,))


def test_auto_without_gpus_is_the_cpu_and_cpu_is_the_cpu() -> None:
    assert resolve(placed("auto"), NoInventory(), "m") == ((),)
    assert resolve(placed("cpu"), FOUR, "m") == ((),)


def test_asking_for_a_gpu_where_there_is_none_is_a_load_error_that_says_why() -> None:
    with pytest.raises(DefinitionError) as info:
        resolve(placed("gpu"), NoInventory("nvidia-ml-py is not installed"), "model 'm'")
    assert str(info.value) == (
        "model 'm' asks for a GPU (devices: gpu), but nvidia-ml-py is not installed"
    )


def test_asking_for_gpus_the_machine_lacks_names_them() -> None:
    with pytest.raises(DefinitionError) as info:
        resolve(placed((1, 5, 7)), FOUR, "model 'm'")
    assert str(info.value) == (
        "model 'm' asks for GPU 5, 7 (devices: [1, 5, 7]), but this machine has GPU 0, 1, 2, 3"
    )


def test_devices_per_worker_groups_the_gpus() -> None:
    assert resolve(placed("gpu", 2), FOUR, "m") == ((0, 1), (2, 3))
    assert resolve(placed((3, 1, 2), 2), FOUR, "m") == ((3, 1),)
    with pytest.raises(DefinitionError, match="asks for 3 GPUs per worker"):
        resolve(placed((0, 1), 3), FOUR, "m")


def test_workers_take_the_least_held_group_and_a_replacement_takes_the_one_it_replaces() -> None:
    assigner = DeviceAssigner(((0,), (1,), (2,)))
    assert [assigner.take(str(i)) for i in range(1, 6)] == [(0,), (1,), (2,), (0,), (1,)]
    assigner.vacate("2")  # worker 2 (GPU 1) is being replaced
    assert assigner.take("6") == (1,)
    assigner.release("3")  # worker 3 (GPU 2) scaled down: the next new one goes there
    assert assigner.take("7") == (2,)
    assert assigner.of("7") == (2,) and assigner.of("3") is None


def test_the_environment_of_a_worker_process() -> None:
    hiding = DeviceAssigner((), hide=True)
    assert hiding.env((2,)) == {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": "2",
        "PODIUM_DEVICE": "cuda:0",
    }
    assert hiding.env((0, 3))["CUDA_VISIBLE_DEVICES"] == "0,3"
    assert hiding.env(())["CUDA_VISIBLE_DEVICES"] == ""  # devices: cpu: no GPU visible
    assert hiding.env(())["PODIUM_DEVICE"] == "cpu"
    # no GPU found (nvidia-ml-py may just be absent): the server's own variable is left alone
    assert DeviceAssigner(()).env(()) == {"PODIUM_DEVICE": "cpu"}
    assert assigner_for(placed("cpu"), "m", FOUR).env(()) == hiding.env(())
    assert assigner_for(placed(), "m", NoInventory()).env(()) == {"PODIUM_DEVICE": "cpu"}


# -- discovery -----------------------------------------------------------------------------------


def test_fake_gpus_from_the_environment_and_a_bad_count_refused() -> None:
    assert len(discover({"PODIUM_FAKE_GPUS": "4"}).gpus()) == 4
    with pytest.raises(ValueError, match="PODIUM_FAKE_GPUS must be a whole number"):
        discover({"PODIUM_FAKE_GPUS": "4000"})


def test_without_nvml_the_server_runs_on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # an import of it fails
    found = discover({})
    assert found.gpus() == () and "nvidia-ml-py is not installed" in found.reason  # type: ignore[attr-defined]


class _Memory:
    def __init__(self, total: int, used: int) -> None:
        self.total, self.used = total, used


def _fake_nvml(count: int) -> Any:
    """The part of pynvml NvmlInventory calls, answering for ``count`` GPUs."""
    nvml = types.SimpleNamespace()
    nvml.NVML_TEMPERATURE_GPU = 0
    nvml.nvmlDeviceGetCount = lambda: count
    nvml.nvmlDeviceGetHandleByIndex = lambda i: i
    nvml.nvmlDeviceGetUUID = lambda h: f"GPU-{h:04d}"
    nvml.nvmlDeviceGetName = lambda h: b"NVIDIA H200"
    nvml.nvmlDeviceGetMemoryInfo = lambda h: _Memory(141 << 30, (h + 1) << 30)
    nvml.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=50 + h)
    nvml.nvmlDeviceGetPowerUsage = lambda h: 300_000
    nvml.nvmlDeviceGetEnforcedPowerLimit = lambda h: 700_000

    def temperature(h: int, sensor: int) -> int:
        raise RuntimeError("not supported")  # a query a GPU does not answer: None

    nvml.nvmlDeviceGetTemperature = temperature
    nvml.nvmlDeviceGetTotalEnergyConsumption = lambda h: 5_000
    nvml.nvmlDeviceGetComputeRunningProcesses = lambda h: [
        types.SimpleNamespace(pid=100 + h, usedGpuMemory=1 << 20)
    ]
    return nvml


def test_nvml_inventory_reads_and_samples_what_the_library_says() -> None:
    found = NvmlInventory(_fake_nvml(2), None)
    assert [(g.index, g.local, g.name, g.uuid) for g in found.gpus()] == [
        (0, 0, "NVIDIA H200", "GPU-0000"),
        (1, 1, "NVIDIA H200", "GPU-0001"),
    ]
    first = found.sample()[0]
    assert (first.utilization, first.memory_used, first.memory_total) == (50.0, 1 << 30, 141 << 30)
    assert (first.power_watts, first.power_limit_watts, first.energy_joules) == (300, 700, 5)
    assert first.temperature_c is None
    assert found.process_memory() == {0: {100: 1 << 20}, 1: {101: 1 << 20}}


def test_the_servers_own_cuda_visible_devices_limits_and_renumbers_the_gpus() -> None:
    found = NvmlInventory(_fake_nvml(4), "3,GPU-0001")
    assert [(g.index, g.local) for g in found.gpus()] == [(3, 0), (1, 1)]
    assigner = DeviceAssigner(resolve(placed(), found, "m"), local={3: 0, 1: 1})
    assert assigner.name((3,)) == "cuda:0"  # a thread worker on GPU 3 computes on cuda:0 here


# -- what the model is told and what its failures become -----------------------------------------


def test_device_outside_a_worker_is_the_cpu_and_inside_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PODIUM_DEVICE", raising=False)
    assert podium.device() == "cpu"
    with using("cuda:3"):
        assert device() == "cuda:3" and gpu_index(device()) == 3
    monkeypatch.setenv("PODIUM_DEVICE", "cuda:0")  # in a worker process
    assert device() == "cuda:0"
    assert gpu_index("cpu") is None


class OutOfMemoryError(RuntimeError):
    """Named as torch's (torch.OutOfMemoryError), without torch."""


def test_out_of_memory_is_recognised_by_class_name_or_message_never_host_memory() -> None:
    assert is_out_of_memory(OutOfMemoryError("Tried to allocate 2.00 GiB"))
    assert is_out_of_memory(RuntimeError("CUDA error: out of memory"))
    assert is_out_of_memory(RuntimeError("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"))
    wrapped = ValueError("inference failed")
    wrapped.__cause__ = OutOfMemoryError("CUDA out of memory.")
    assert is_out_of_memory(wrapped)
    assert not is_out_of_memory(MemoryError())
    assert not is_out_of_memory(ValueError("bad shape"))


def test_a_lost_device_is_recognised_by_cudas_messages() -> None:
    assert is_device_lost(RuntimeError("CUDA error: unspecified launch failure"))
    assert is_device_lost(RuntimeError("NVML: GPU is lost"))
    assert not is_device_lost(RuntimeError("CUDA error: out of memory"))


def test_an_oom_becomes_507_and_the_frameworks_cache_is_emptied(
    monkeypatch: pytest.MonkeyPatch, torch_cache: list[bool]
) -> None:
    with using("cuda:1"):
        error = model_error("m", "predict", OutOfMemoryError("CUDA out of memory. " + "x" * 5000))
    assert isinstance(error, DeviceOutOfMemory)
    assert (http_status(error), grpc_code(error)) == (507, "RESOURCE_EXHAUSTED")
    assert "ran out of memory on cuda:1" in str(error) and len(str(error)) < 1200  # bounded
    assert torch_cache == [True]
    lost = model_error("m", "predict", RuntimeError("CUDA error: unspecified launch failure"))
    assert isinstance(lost, DeviceLost) and http_status(lost) == 500
    empty_cache()  # torch absent or broken: nothing happens
    monkeypatch.delitem(sys.modules, "torch")
    empty_cache()


# -- thread workers ------------------------------------------------------------------------------

MODEL = """
import os, podium

CUDA_ERROR = "CUDA error: unspecified launch failure"

class OutOfMemoryError(RuntimeError):
    pass

class Model:
    def __init__(self):
        self.built_on = podium.device()

    def load(self):
        self.loaded_on = podium.device()

    def predict(self, inputs):
        if inputs == "oom":
            raise OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        if inputs == "lost":
            raise RuntimeError(CUDA_ERROR)
        return {"built": self.built_on, "loaded": self.loaded_on, "predict": podium.device(),
                "me": id(self), "pid": os.getpid(), "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
                "order": os.environ.get("CUDA_DEVICE_ORDER")}
"""


def version_of(
    tmp_path: Path, code: str, config: str, executor: ThreadPoolExecutor, name: str = "m"
) -> ModelVersion:
    """Model ``name`` from ``code`` and ``config``, built (not loaded)."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "model.py").write_text(code)
    (folder / "config.yaml").write_text(textwrap.dedent(config))
    found, problems = discover_all(folder)
    assert not problems
    return build_version(found[0], secrets={}, executor=executor, codec=RequestSnapshots())


def thread_version(
    tmp_path: Path, config: str, executor: ThreadPoolExecutor, name: str = "m"
) -> ModelVersion:
    return version_of(tmp_path, MODEL, config, executor, name)


@contextlib.asynccontextmanager
async def loaded(mv: ModelVersion) -> AsyncIterator[ModelVersion]:
    """``mv`` loaded, and closed at the end."""
    await mv.load()
    try:
        yield mv
    finally:
        await mv.close()


async def _answers(mv: ModelVersion, n: int) -> list[dict[str, Any]]:
    return list(await asyncio.gather(*(mv.scheduler.infer(i, None) for i in range(n))))


@pytest.mark.anyio
async def test_thread_workers_are_spread_over_the_gpus_and_told_theirs(
    tmp_path: Path, executor: ThreadPoolExecutor, gpus: FakeInventory
) -> None:
    async with loaded(thread_version(tmp_path, "min_workers: 4\n", executor)) as mv:
        assert mv.state is ModelState.READY, mv.reason
        infos = mv.workers()
        assert [(w.devices, w.device) for w in infos] == [
            ((0,), "cuda:0"),
            ((1,), "cuda:1"),
            ((2,), "cuda:2"),
            ((3,), "cuda:3"),
        ]
        answers = await _answers(mv, 16)
        seen = {(a["built"], a["loaded"], a["predict"]) for a in answers}
        assert seen <= {(f"cuda:{i}",) * 3 for i in range(4)}  # each instance: one device
        assert len({a["me"] for a in answers}) == len(seen)


@pytest.mark.anyio
async def test_workers_per_device_runs_that_many_on_each_listed_gpu(
    tmp_path: Path, executor: ThreadPoolExecutor, gpus: FakeInventory
) -> None:
    async with loaded(
        thread_version(tmp_path, "devices: [1, 3]\nworkers_per_device: 2\n", executor)
    ) as mv:
        assert sorted(w.device for w in mv.workers()) == ["cuda:1", "cuda:1", "cuda:3", "cuda:3"]
        await mv.scale(1)  # scaling down frees places; scaling up fills the emptiest
        await mv.scale(3)
        assert sorted(w.device for w in mv.workers()) == ["cuda:1", "cuda:1", "cuda:3"]


@pytest.mark.anyio
async def test_a_model_asking_for_a_gpu_on_a_machine_without_fails_to_load_saying_why(
    tmp_path: Path, executor: ThreadPoolExecutor, no_gpus: None
) -> None:
    with pytest.raises(DefinitionError, match=r"asks for a GPU \(devices: gpu\), but no GPU here"):
        thread_version(tmp_path, "devices: gpu\n", executor)
    async with loaded(thread_version(tmp_path, "devices: auto\n", executor, name="auto")) as auto:
        [answer] = await _answers(auto, 1)
        assert answer["predict"] == "cpu" and auto.workers()[0].devices == ()


@pytest.mark.anyio
async def test_an_oom_fails_that_request_alone_and_repeated_ones_show_in_readiness(
    tmp_path: Path, executor: ThreadPoolExecutor, gpus: FakeInventory
) -> None:
    async with loaded(thread_version(tmp_path, "devices: [2]\n", executor)) as mv:
        with pytest.raises(DeviceOutOfMemory) as info:
            await mv.scheduler.infer("oom", None)
        assert http_status(info.value) == 507 and "on cuda:2" in str(info.value)
        assert (await mv.scheduler.infer(1, None))["predict"] == "cuda:2"  # serves on
        assert mv.trouble() == ""
        for _ in range(4):
            with pytest.raises(DeviceOutOfMemory):
                await mv.scheduler.infer("oom", None)
        assert mv.trouble().startswith("out of device memory 5 times in the last 60 s")
        assert mv.stats.out_of_memory == {"cuda:2": 5}
        assert len(mv.workers()) == 1  # never restarted for it


@pytest.mark.anyio
async def test_a_lost_device_replaces_the_thread_worker_on_the_same_device(
    tmp_path: Path,
    executor: ThreadPoolExecutor,
    gpus: FakeInventory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with loaded(thread_version(tmp_path, "min_workers: 2\n", executor)) as mv:
        before = {w.id: w.device for w in mv.workers()}
        with pytest.raises(DeviceLost):
            await mv.scheduler.infer("lost", None)
        await wait_until(
            lambda: len(mv.workers()) == 2 and set(before) != {w.id for w in mv.workers()}
        )
        after = {w.id: w.device for w in mv.workers()}
        assert sorted(after.values()) == sorted(before.values())  # the new one took the same
        assert mv.stats.restarts == {RestartReason.DEVICE_LOST: 1}
        assert sum(mv.stats.lost_devices.values()) == 1
        assert "unspecified launch failure" in caplog.text  # the error, in the log


MEMORY_MODEL = """
import weakref, podium
from podium.devices import gpu_index
from podium.runtime.devices import inventory

class Model:
    def __init__(self):
        # what a framework does on its GPU, shown to the fake inventory: 1 GiB held while alive
        fake, gpu = inventory(), gpu_index(podium.device())
        fake.used[gpu] += 1 << 30
        weakref.finalize(self, fake.used.__setitem__, gpu, 0)

    def predict(self, inputs):
        return inputs
"""


@pytest.mark.anyio
async def test_scaling_down_releases_a_thread_workers_instance_and_empties_the_cache(
    tmp_path: Path,
    executor: ThreadPoolExecutor,
    gpus: FakeInventory,
    torch_cache: list[bool],
) -> None:
    mv = version_of(tmp_path, MEMORY_MODEL, "min_workers: 2\ndevices: [1, 2]\n", executor)
    await mv.load()
    try:
        assert gpus.used == [0, 1 << 30, 1 << 30, 0]
        await mv.scale(1)  # the newest goes: worker 2, on GPU 2
        assert gpus.used == [0, 1 << 30, 0, 0]  # its memory returned
        assert torch_cache
    finally:
        await mv.close()
    del mv  # unloaded and forgotten (as the registry forgets it): nothing holds the last one
    gc.collect()
    assert gpus.used == [0, 0, 0, 0]


# -- worker processes ----------------------------------------------------------------------------


def process_version(tmp_path: Path, config: str, executor: ThreadPoolExecutor) -> ModelVersion:
    return version_of(tmp_path, MODEL, "workers: process\n" + config, executor)


async def _by_pid(mv: ModelVersion) -> dict[int, dict[str, Any]]:
    """Each worker process's answer, asking until every one has answered, once every one is
    ready (a worker that is still starting, or starting again, takes no request; on a loaded
    machine that can outlast many rounds of requests)."""
    await wait_until(lambda: all(w.state == "ready" for w in mv.workers()), 30.0)
    seen: dict[int, dict[str, Any]] = {}
    pids = {w.pid for w in mv.workers()}
    for _ in range(50):
        for answer in await asyncio.gather(*(mv.scheduler.infer(i, None) for i in range(8))):
            seen[answer["pid"]] = answer
        if set(seen) >= pids:
            break
    return {pid: seen[pid] for pid in pids}


@pytest.mark.anyio
async def test_each_worker_process_sees_only_its_gpu_and_a_restart_keeps_it(
    tmp_path: Path, executor: ThreadPoolExecutor, gpus: FakeInventory
) -> None:
    async with loaded(
        process_version(tmp_path, "devices: [1, 3]\nworkers_per_device: 2\n", executor)
    ) as mv:
        assert mv.state is ModelState.READY, mv.reason
        infos = {w.pid: w for w in mv.workers()}
        answers = await _by_pid(mv)
        for pid, answer in answers.items():
            physical = infos[pid].devices
            assert answer["visible"] == ",".join(map(str, physical))
            assert answer["order"] == "PCI_BUS_ID"
            assert answer["predict"] == answer["built"] == "cuda:0"  # its one GPU, renumbered
        assert sorted(a["visible"] for a in answers.values()) == ["1", "1", "3", "3"]
        victim = next(pid for pid, w in infos.items() if w.devices == (3,))
        os.kill(victim, signal.SIGKILL)
        await wait_until(
            lambda: (
                victim not in {w.pid for w in mv.workers()}
                and sum(w.state == "ready" for w in mv.workers()) == 4
            ),
            10.0,
        )
        assert sorted(w.devices for w in mv.workers()) == [(1,), (1,), (3,), (3,)]
        answers = await _by_pid(mv)
        assert sorted(a["visible"] for a in answers.values()) == ["1", "1", "3", "3"]


@pytest.mark.anyio
async def test_a_worker_process_whose_device_is_lost_is_replaced_there_and_ooms_are_counted(
    tmp_path: Path, executor: ThreadPoolExecutor, gpus: FakeInventory
) -> None:
    async with loaded(process_version(tmp_path, "devices: [2]\n", executor)) as mv:
        [before] = mv.workers()
        with pytest.raises(DeviceOutOfMemory) as oom:
            await mv.scheduler.infer("oom", None)
        assert http_status(oom.value) == 507
        assert (await mv.scheduler.infer(1, None))["pid"] == before.pid  # it serves on
        assert mv.stats.out_of_memory == {"cuda:2": 1}
        with pytest.raises(DeviceLost):
            await mv.scheduler.infer("lost", None)
        await wait_until(
            lambda: (
                [w.state for w in mv.workers()] == ["ready"] and mv.workers()[0].pid != before.pid
            ),
            10.0,
        )
        [after] = mv.workers()
        assert after.devices == (2,)
        assert (await mv.scheduler.infer(1, None))["visible"] == "2"
        assert mv.stats.restarts == {RestartReason.DEVICE_LOST: 1}
        assert mv.stats.lost_devices == {"cuda:2": 1}
