"""The device a model's code runs on, as every contract tells it (``podium.device()``), and how a
device's failures look from the model's side (out of memory, a lost device).

One rule for every contract (native, Truss, TorchServe, MLServer): inside the model's
``__init__``, ``load`` and ``predict`` (and a TorchServe handler's ``initialize`` / ``handle``),
``podium.device()`` is the framework's name of the device its worker was given: ``"cuda:N"`` or
``"cpu"``. A thread worker runs in the server process and sees every GPU, so its device is the
GPU's index there (``cuda:2``); a worker process starts with ``CUDA_VISIBLE_DEVICES`` set to its
GPU(s), so it is always ``cuda:0`` there. The worker pool assigns the devices
(``runtime/devices.py``); this module only carries the answer, so the contracts below the
runtime can read it.

A worker process reads its device from ``PODIUM_DEVICE``, which its parent sets with
``CUDA_VISIBLE_DEVICES``; a thread worker's is a context variable set around the calls into the
model. Neither imports a framework: a CUDA error is recognised by its class name and message.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import sys
from collections.abc import Iterator

__all__ = [
    "CPU",
    "DEVICE_ENV",
    "device",
    "empty_cache",
    "gpu_index",
    "is_device_lost",
    "is_out_of_memory",
    "running_on",
    "set_device",
    "using",
]

logger = logging.getLogger("podium.devices")

CPU = "cpu"
#: The variable a worker process reads its device from (set by the server with
#: ``CUDA_VISIBLE_DEVICES``).
DEVICE_ENV = "PODIUM_DEVICE"

_current: contextvars.ContextVar[str | None] = contextvars.ContextVar("podium_device", default=None)


def device() -> str:
    """The device this worker's model computes on: ``"cuda:N"`` or ``"cpu"`` (a framework's
    own spelling: ``model.to(podium.device())``). Outside a worker: ``"cpu"``."""
    current = _current.get()
    if current is not None:
        return current
    return os.environ.get(DEVICE_ENV) or CPU


def running_on() -> str | None:
    """The GPU a thread worker's model code runs on here ("cuda:2"), set by :func:`using`; None
    elsewhere (the CPU, outside a model, a worker process: its log lines name their device
    once for all)."""
    current = _current.get()
    return current if current is not None and current != CPU else None


@contextlib.contextmanager
def using(name: str) -> Iterator[None]:
    """``device()`` answers ``name`` within this block (in this context and the ones copied
    from it: threads that run the model's sync code copy the caller's context)."""
    token = _current.set(name)
    try:
        yield
    finally:
        _current.reset(token)


def set_device(name: str) -> None:
    """``device()`` answers ``name`` for the rest of this context: for a task of its own (a
    stream's producer), whose context ends with it."""
    _current.set(name)


def gpu_index(name: str) -> int | None:
    """The GPU number of a device name (``"cuda:2"`` → 2); None for the CPU."""
    kind, _, index = name.partition(":")
    if kind != "cuda":
        return None
    return int(index) if index.isdigit() else 0


#: Messages of an out-of-memory error on a device: torch's (``torch.OutOfMemoryError``, which
#: says "CUDA out of memory"), CUDA's own, cuDNN's, cuBLAS's; matched case-insensitively.
_OOM_MESSAGES = (
    "cuda out of memory",
    "cuda error: out of memory",
    "cudnn_status_alloc_failed",
    "cublas_status_alloc_failed",
    "out of memory on device",
)
#: Messages of a device that is gone or broken for this process (its CUDA context cannot be
#: used again): the driver's Xid-class failures as CUDA reports them.
_LOST_MESSAGES = (
    "gpu is lost",
    "cuda error: unspecified launch failure",
    "cuda error: an illegal memory access was encountered",
    "cuda error: uncorrectable ecc error",
    "cuda error: device-side assert triggered",
    "cuda error: unknown error",
    "cuda error: the launch timed out and was terminated",
    "cuda error: no cuda-capable device is detected",
    "nvml_error_gpu_is_lost",
)


def _says(exc: BaseException, messages: tuple[str, ...], class_name: str = "") -> bool:
    """Whether ``exc`` or what caused it (its first eight links) is of class ``class_name``, or
    says one of ``messages`` (case-insensitive)."""
    seen: set[int] = set()
    error: BaseException | None = exc
    while error is not None and id(error) not in seen and len(seen) < 8:
        seen.add(id(error))
        text = str(error)[:4096].lower()
        if type(error).__name__ == class_name or any(m in text for m in messages):
            return True
        error = error.__cause__ or error.__context__
    return False


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is a device running out of memory: torch's
    ``OutOfMemoryError`` by class name, or an out-of-memory message from CUDA or its libraries.
    Host memory (``MemoryError``) is not a device's."""
    return _says(exc, _OOM_MESSAGES, "OutOfMemoryError")


def is_device_lost(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) says the device is lost or its context broken: the
    worker must be restarted to use a device again."""
    return _says(exc, _LOST_MESSAGES)


def empty_cache() -> None:
    """Give back what the framework caches on the device (torch's caching allocator), where the
    model's code has imported it: never imported here."""
    torch = sys.modules.get("torch")
    if torch is None:
        return
    try:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.empty_cache()
    except Exception:  # a broken device: nothing to free, and the caller reports the error
        logger.debug("torch.cuda.empty_cache() failed", exc_info=True)
