"""Devices: which accelerators this machine has, which of them a model may use, and which one
each of its workers gets (docs/devices.md).

- **Discovery** (:class:`Inventory`): NVIDIA GPUs through ``nvidia-ml-py`` (``pynvml``, the
  optional extra ``gpu``), read once; none when the library or the driver is absent. Tests and
  the dry run of ``bench/gpu.py`` give the server a :class:`FakeInventory` instead: in place of
  the module's ``_inventory``, or with ``PODIUM_FAKE_GPUS=N`` in the server's environment (an
  operator's switch; nothing a client sends reaches it).
- **Placement**: what a model's config asks (``devices``, ``workers_per_device``,
  ``devices_per_worker``), resolved against the inventory into the device groups its workers
  take (:func:`resolve`): a clear load error when it asks for GPUs that are not there; ``auto``
  falls back to the CPU.
- **Assignment** (:class:`DeviceAssigner`): each new worker takes the group holding the fewest
  workers (lowest first: round-robin as workers start); a worker that is replaced (it died, was
  stuck, its device failed) gives its group to its replacement.

Process workers see only their group (``CUDA_VISIBLE_DEVICES``, :meth:`DeviceAssigner.env`); thread
workers compute on it by its index in the server (``podium.device()``: ``podium/devices.py``).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..config import ModelConfig
from ..devices import CPU, DEVICE_ENV
from ..errors import DefinitionError

__all__ = [
    "FAKE_GPUS_ENV",
    "DeviceAssigner",
    "FakeInventory",
    "Gpu",
    "GpuSample",
    "Group",
    "Inventory",
    "NoInventory",
    "NvmlInventory",
    "assigner_for",
    "describe_group",
    "discover",
    "inventory",
    "resolve",
]

logger = logging.getLogger("podium.devices")

#: ``PODIUM_FAKE_GPUS=N``: the server believes it has N GPUs (tests, the bench's dry run).
FAKE_GPUS_ENV = "PODIUM_FAKE_GPUS"
#: The most fake GPUs (a typo such as 4000 should not make thousands of workers' worth).
MAX_FAKE_GPUS = 64


@dataclass(frozen=True, slots=True)
class Gpu:
    """One GPU: ``index`` is its number in PCI bus order (``CUDA_DEVICE_ORDER=PCI_BUS_ID``, the
    order NVML and ``nvidia-smi`` use), ``local`` its CUDA index in this process (they differ
    when the server itself runs under ``CUDA_VISIBLE_DEVICES``)."""

    index: int
    local: int
    name: str
    uuid: str
    memory_total: int  # bytes


@dataclass(frozen=True, slots=True)
class GpuSample:
    """What a GPU reports now; None where the library does not say."""

    gpu: Gpu
    utilization: float | None  # percent of the last sample period with a kernel running
    memory_used: int | None  # bytes
    memory_total: int
    power_watts: float | None
    power_limit_watts: float | None
    temperature_c: float | None
    energy_joules: float | None  # since the driver was loaded


class Inventory(Protocol):
    """The GPUs a server may use, and their state when asked."""

    def gpus(self) -> tuple[Gpu, ...]: ...

    def sample(self) -> list[GpuSample]: ...

    def process_memory(self) -> dict[int, dict[int, int]]:
        """Device memory in use by each process, by GPU number: ``{gpu: {pid: bytes}}``."""
        ...


class NoInventory:
    """A machine without GPUs (or without the library to find them)."""

    reason = "no GPU"

    def __init__(self, reason: str = "no GPU") -> None:
        self.reason = reason

    def gpus(self) -> tuple[Gpu, ...]:
        return ()

    def sample(self) -> list[GpuSample]:
        return []

    def process_memory(self) -> dict[int, dict[int, int]]:
        return {}


class FakeInventory:
    """``count`` pretend GPUs of ``memory`` bytes each, for tests and dry runs. Their used memory
    and utilisation are what the test sets (``used[i]``, ``utilization[i]``)."""

    def __init__(self, count: int, *, memory: int = 16 << 30, name: str = "Fake GPU") -> None:
        self._gpus = tuple(
            Gpu(i, i, name, f"GPU-fake-{i:04d}", memory) for i in range(max(0, count))
        )
        self.used = [0] * len(self._gpus)
        self.utilization = [0.0] * len(self._gpus)
        #: device memory by process, by GPU number: what :meth:`process_memory` answers
        self.processes: dict[int, dict[int, int]] = {}

    def gpus(self) -> tuple[Gpu, ...]:
        return self._gpus

    def process_memory(self) -> dict[int, dict[int, int]]:
        return {gpu: dict(pids) for gpu, pids in self.processes.items()}

    def sample(self) -> list[GpuSample]:
        return [
            GpuSample(
                g,
                self.utilization[g.index],
                self.used[g.index],
                g.memory_total,
                None,
                None,
                None,
                None,
            )
            for g in self._gpus
        ]


class NvmlInventory:
    """The NVIDIA GPUs NVML finds, in its (PCI bus) order; those the server's own
    ``CUDA_VISIBLE_DEVICES`` hides are left out. NVML is initialised once and kept."""

    def __init__(self, pynvml: Any, visible: str | None) -> None:
        self._nvml = pynvml
        self._lock = threading.Lock()
        count = pynvml.nvmlDeviceGetCount()
        found: list[tuple[int, Any, str]] = []
        for i in range(count):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            found.append((i, handle, _text(pynvml.nvmlDeviceGetUUID(handle))))
        chosen = _visible(found, visible)
        gpus, handles = [], []
        for local, (i, handle, uuid) in enumerate(chosen):
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            gpus.append(
                Gpu(i, local, _text(pynvml.nvmlDeviceGetName(handle)), uuid, int(memory.total))
            )
            handles.append(handle)
        self._gpus = tuple(gpus)
        self._handles = tuple(handles)

    def gpus(self) -> tuple[Gpu, ...]:
        return self._gpus

    def sample(self) -> list[GpuSample]:
        nvml = self._nvml
        out = []
        with self._lock:
            for gpu, handle in zip(self._gpus, self._handles, strict=True):
                memory = _ask(nvml.nvmlDeviceGetMemoryInfo, handle)
                rates = _ask(nvml.nvmlDeviceGetUtilizationRates, handle)
                power = _ask(nvml.nvmlDeviceGetPowerUsage, handle)  # milliwatts
                limit = _ask(nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
                temperature = _ask(nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU)
                energy = _ask(nvml.nvmlDeviceGetTotalEnergyConsumption, handle)  # millijoules
                out.append(
                    GpuSample(
                        gpu,
                        None if rates is None else float(rates.gpu),
                        None if memory is None else int(memory.used),
                        gpu.memory_total if memory is None else int(memory.total),
                        None if power is None else power / 1000,
                        None if limit is None else limit / 1000,
                        None if temperature is None else float(temperature),
                        None if energy is None else energy / 1000,
                    )
                )
        return out

    def process_memory(self) -> dict[int, dict[int, int]]:
        nvml = self._nvml
        out: dict[int, dict[int, int]] = {}
        with self._lock:
            for gpu, handle in zip(self._gpus, self._handles, strict=True):
                running = _ask(nvml.nvmlDeviceGetComputeRunningProcesses, handle) or []
                out[gpu.index] = {
                    int(p.pid): int(p.usedGpuMemory or 0)
                    for p in running
                    if getattr(p, "usedGpuMemory", None) is not None
                }
        return out


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _ask(call: Any, *args: Any) -> Any:
    """One NVML query; None where the GPU does not support it (or has failed)."""
    try:
        return call(*args)
    except Exception:
        return None


def _visible(found: list[tuple[int, Any, str]], visible: str | None) -> list[tuple[int, Any, str]]:
    """The GPUs ``CUDA_VISIBLE_DEVICES`` leaves to the server (numbers or UUIDs, in its order;
    as CUDA, the list stops at the first entry that names no GPU)."""
    if visible is None:
        return found
    chosen = []
    for entry in (e.strip() for e in visible.split(",")):
        match = [
            f
            for f in found
            if (entry.isdigit() and f[0] == int(entry)) or (entry and f[2].startswith(entry))
        ]
        if not match:
            break
        chosen.append(match[0])
    return chosen


def discover(environ: Mapping[str, str] | None = None) -> Inventory:
    """This machine's GPUs: ``PODIUM_FAKE_GPUS`` when set, else NVML's; CPU only (with the
    reason logged once) when ``nvidia-ml-py`` is not installed or finds no driver."""
    env = os.environ if environ is None else environ
    fake = env.get(FAKE_GPUS_ENV)
    if fake is not None:
        if not fake.isdigit() or int(fake) > MAX_FAKE_GPUS:
            raise ValueError(
                f"{FAKE_GPUS_ENV} must be a whole number 0-{MAX_FAKE_GPUS}, got {fake[:20]!r}"
            )
        logger.warning("using %s fake GPUs (%s)", fake, FAKE_GPUS_ENV)
        return FakeInventory(int(fake))
    try:
        import pynvml  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except ImportError:
        # a driver without the library is worth a warning: the GPUs are there, unused
        log = logger.warning if os.path.isdir("/proc/driver/nvidia/gpus") else logger.info
        log("devices: CPU only (nvidia-ml-py is not installed: pip install 'podium[gpu]')")
        return NoInventory("nvidia-ml-py is not installed")
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # no driver, no GPU
        logger.info("devices: CPU only (NVML: %s)", exc)
        return NoInventory(f"NVML: {exc}")
    found = NvmlInventory(pynvml, env.get("CUDA_VISIBLE_DEVICES"))
    logger.info(
        "devices: %s", ", ".join(f"GPU {g.index} {g.name}" for g in found.gpus()) or "CPU only"
    )
    return found


_inventory: Inventory | None = None
_inventory_lock = threading.Lock()


def inventory() -> Inventory:
    """The server's inventory: discovered the first time it is asked for (a model's load)."""
    global _inventory
    with _inventory_lock:
        if _inventory is None:
            try:
                _inventory = discover()
            except ValueError as exc:  # PODIUM_FAKE_GPUS, misspelt
                raise DefinitionError(str(exc)) from None
        return _inventory


# -- placement -------------------------------------------------------------------------------

#: A worker's devices: the GPU numbers it holds (PCI order), or () for the CPU.
Group = tuple[int, ...]


def resolve(config: ModelConfig, found: Inventory, label: str) -> tuple[Group, ...]:
    """The device groups a model's config gives its workers on this machine (``devices``:
    ``"auto"``, ``"cpu"``, ``"gpu"`` or GPU numbers): ``((),)`` for the CPU, else groups of
    ``devices_per_worker`` GPUs (GPUs left over are not used). ``DefinitionError`` (the model
    fails to load, saying why) where it asks for GPUs that are not there; ``auto`` without GPUs
    is the CPU (logged)."""
    asked = config.devices
    gpus = found.gpus()
    numbers = [g.index for g in gpus]
    why = getattr(found, "reason", "no GPU was found")
    if asked == "cpu":
        return ((),)
    if asked in ("auto", "gpu"):
        if not numbers:
            if asked == "auto":
                logger.info("%s: devices 'auto' and %s: it runs on the CPU", label, why)
                return ((),)
            raise DefinitionError(f"{label} asks for a GPU (devices: gpu), but {why}")
        chosen = numbers
    elif isinstance(asked, str):  # a word ModelConfig would have refused
        raise DefinitionError(f"{label}: devices must be auto, cpu, gpu or GPU numbers")
    else:
        missing = [i for i in asked if i not in numbers]
        if missing:
            have = ", ".join(map(str, numbers)) or f"none: {why}"
            raise DefinitionError(
                f"{label} asks for GPU {', '.join(map(str, missing))} (devices: "
                f"{list(asked)}), but this machine has GPU {have}"
            )
        chosen = list(asked)
    per = config.devices_per_worker
    if per > len(chosen):
        raise DefinitionError(
            f"{label} asks for {per} GPUs per worker (devices_per_worker), but it may use "
            f"{len(chosen)}: {', '.join(map(str, chosen))}"
        )
    groups = tuple(tuple(chosen[i : i + per]) for i in range(0, len(chosen) - per + 1, per))
    if len(groups) * per < len(chosen):
        logger.warning(
            "%s: %d GPU(s) left unused: %d per worker", label, len(chosen) - len(groups) * per, per
        )
    return groups


@dataclass(slots=True)
class DeviceAssigner:
    """Which worker holds which group. A new worker takes the group with the fewest workers
    (the first such: round-robin as they start); ``workers_per_device`` caps each group when
    set. A replaced worker's group is kept for its replacement (:meth:`vacate`)."""

    groups: tuple[Group, ...]
    per_group: int = 0  # 0: no cap
    hide: bool = False  # the model asked for the CPU: its worker processes see no GPU
    local: dict[int, int] = field(default_factory=dict)  # GPU number → CUDA index in the server
    _held: dict[str, Group] = field(default_factory=dict)
    _vacated: list[Group] = field(default_factory=list)

    def take(self, wid: str) -> Group:
        """The group worker ``wid`` runs on: one a replaced worker left, else the least held."""
        if self._vacated:
            group = self._vacated.pop(0)
        else:
            counts = {g: 0 for g in self.groups}
            for held in self._held.values():
                if held in counts:
                    counts[held] += 1
            group = min(self.groups, key=lambda g: counts[g])
        self._held[wid] = group
        return group

    def release(self, wid: str) -> None:
        """Worker ``wid`` left for good (scaled down, unloaded): its place is free."""
        self._held.pop(wid, None)

    def vacate(self, wid: str) -> None:
        """Worker ``wid`` is being replaced: the next worker started takes its group."""
        group = self._held.pop(wid, None)
        if group is not None:
            self._vacated.append(group)

    def forget_vacated(self) -> None:
        self._vacated.clear()

    def of(self, wid: str) -> Group | None:
        return self._held.get(wid)

    def name(self, group: Group) -> str:
        """The framework's name of a group's first device in the server process: ``cuda:N`` (N
        its local CUDA index) or ``cpu``."""
        return f"cuda:{self.local.get(group[0], group[0])}" if group else CPU

    def env(self, group: Group) -> dict[str, str]:
        """What a worker process on ``group`` adds to its environment: only its GPUs visible,
        numbered as NVML numbers them (so ``cuda:0`` is its first GPU). On the CPU, no GPU
        visible when ``hide`` (the model said ``devices: cpu``); else (no GPU was found: perhaps
        only because nvidia-ml-py is absent) the variable is left as the server has it."""
        if not group and not self.hide:
            return {DEVICE_ENV: CPU}
        return {
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "CUDA_VISIBLE_DEVICES": ",".join(map(str, group)),
            DEVICE_ENV: "cuda:0" if group else CPU,
        }

    @property
    def workers(self) -> int:
        """How many workers ``workers_per_device`` asks for (0: it does not)."""
        return self.per_group * len(self.groups)


def assigner_for(config: ModelConfig, label: str, found: Inventory | None = None) -> DeviceAssigner:
    """The assigner of a model version's workers, from its config (``workers_per_device``: 0 =
    ``min_workers`` decides), on this machine."""
    found = inventory() if found is None else found
    groups = resolve(config, found, label)
    local = {g.index: g.local for g in found.gpus()}
    hide = config.devices == "cpu"
    return DeviceAssigner(groups, config.workers_per_device, hide, local)


def describe_group(group: Group) -> str:
    """A group as logs and describe name it: ``cpu``, ``gpu 2``, ``gpu 0,1``."""
    return "cpu" if not group else "gpu " + ",".join(map(str, group))
