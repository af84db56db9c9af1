"""What the management API does, shared by the REST app and the gRPC service.

Each operation returns an :class:`Outcome`: the HTTP status (200, or 202 when work goes on in the
background) and the JSON body TorchServe sends; the gRPC ``msg`` carries, as TorchServe's does,
the status text alone for register, scale, set-default and unregister, and the JSON of list and
describe.
Failures are :mod:`podium.errors` exceptions; the front ends map them through the one table.

The work is the data plane's :class:`~podium.dataplane.ModelRepository`'s: this module resolves
a registration's ``url`` (the model store, the ``--allowed-urls`` policy, downloads) and renders
the repository's typed answers as TorchServe's JSON.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...dataplane import ModelRepository, VersionDescription, WorkerDescription
from ...errors import InvalidInput
from ...types import ModelState
from .._auth import iso_utc
from ._params import Registration, Scaling
from ._urls import UrlPolicy

__all__ = ["Management", "Outcome"]

#: The status TorchServe answers when work goes on in the background (HTTP 202).
PROCESSING = "Processing worker updates..."


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a management operation answers: the HTTP status and TorchServe's JSON body (not a
    model's :class:`podium.types.Reply`); ``text``: the status text of an operation that
    answers one (REST sends ``{"status": text}``, gRPC the text itself)."""

    status: int
    body: Any
    text: str | None = None


def _status(text: str, status: int = 200) -> Outcome:
    return Outcome(status, {"status": text}, text)


class Management:
    """The management operations over one model repository (see the module docstring)."""

    def __init__(self, repository: ModelRepository, *, urls: UrlPolicy) -> None:
        self.repository = repository
        self.urls = urls

    # -- register --------------------------------------------------------------------------

    async def register(self, request: Registration) -> Outcome:
        """``POST /models``: find (or download) ``url``, build, register and load the model."""
        downloaded: Path | None = None
        if self.urls.is_remote(request.url):  # download() refuses it first if it may not
            path = downloaded = await self.urls.download(request.url)
        else:
            path = self.urls.local(request.url)
        try:
            registered = await self.repository.register(
                path, url=request.url, overrides=request.overrides()
            )
            if downloaded is not None:  # the file goes when the last of its versions does
                registered.own(self.urls.owned(downloaded, len(registered.versions)))
        except BaseException:
            if downloaded is not None:  # a failed registration leaves no file behind
                with contextlib.suppress(OSError):
                    os.unlink(downloaded)
            raise
        await self.repository.load_registered(registered, synchronous=request.synchronous)
        if not request.synchronous:
            return _status(PROCESSING, 202)
        labels = ", ".join(v for v in registered.versions if v)
        version = f" Version: {labels}" if labels else ""
        return _status(
            f'Model "{registered.name}"{version} registered with {registered.workers} '
            "initial workers"
        )

    # -- unregister ------------------------------------------------------------------------

    async def unregister(self, name: str, version: str | None = None) -> Outcome:
        """``DELETE /models/{m}[/{v}]``: every version of the model, or the one named. New
        requests get 404 at once; requests in flight finish first."""
        _one_version(version, "unregister")
        await self.repository.unregister(name, version)
        return _status(f'Model "{name}" unregistered')

    # -- scale, set-default ----------------------------------------------------------------

    async def scale(self, name: str, version: str | None, request: Scaling) -> Outcome:
        """``PUT /models/{m}[/{v}]``: run ``min_workers`` workers (at most ``max_workers``)."""
        _one_version(version, "scale")
        scaled = await self.repository.scale(
            name,
            version or request.version,
            request.min_workers,
            request.max_workers,
            synchronous=request.synchronous,
        )
        if scaled.pending:
            return _status(PROCESSING, 202)
        text = f"Workers scaled to {request.min_workers} for model: {scaled.name}"
        if scaled.version:
            text += f", version: {scaled.version}"
        return _status(text)

    def set_default(self, name: str, version: str) -> Outcome:
        """``PUT /models/{m}/{v}/set-default``."""
        self.repository.set_default(name, version)
        return _status(f'Default version successfully updated for model "{name}" to "{version}"')

    # -- list, describe --------------------------------------------------------------------

    def list_models(self, limit: int, token: int) -> Outcome:
        """``GET /models``: the default version of each model, by name, a page at a time."""
        models = self.repository.models()
        page = models[token : token + limit]
        body: dict[str, Any] = {}
        if token + limit < len(models):
            body["nextPageToken"] = str(token + limit)
        body["models"] = [{"modelName": m.name, "modelUrl": m.url} for m in page]
        return Outcome(200, body)

    def describe(self, name: str, version: str | None = None) -> Outcome:
        """``GET /models/{m}[/{v}|/all]``: TorchServe's description of each version, with
        Podium's additions (state, readiness and its trouble, load error, default, queue,
        worker kind)."""
        if version == "all":
            versions = self.repository.describe(name, every=True)
        else:
            versions = self.repository.describe(name, version)
        return Outcome(200, [_describe(d) for d in versions])


#: TorchServe's frontend keys that Podium accepts and does not enforce (docs/torchserve.md),
#: described as the model's config sets them, else with TorchServe's defaults.
_ACCEPTED = (
    ("startupTimeout", 120),
    ("maxRetryTimeoutInSec", 300),
    ("clientTimeoutInMills", 0),
)


def _describe(d: VersionDescription) -> dict[str, Any]:
    """TorchServe 0.12's description of one version (its fields in its order), then Podium's
    additions."""
    config = d.config
    raw = config.raw
    held = sorted({n for w in d.workers for n in w.devices})  # the GPUs its workers hold
    gpu = d.device == "gpu" or bool(held)
    out: dict[str, Any] = {
        "modelName": d.name,
        "modelVersion": d.version,
        "modelUrl": d.url,
        "runtime": "python",
        "minWorkers": d.min_workers,
        "maxWorkers": d.max_workers,
        "batchSize": config.batch_size,
        # TorchServe's are integers (ms, s): a whole number is sent as one (7, not 7.0)
        "maxBatchDelay": _whole(config.max_batch_delay_ms),
        "responseTimeout": _whole(config.response_timeout_s),
    }
    for key, default in _ACCEPTED:
        out[key] = raw.get(key, default)
    out["parallelType"] = ""  # model parallelism (torchrun) is refused at load
    out["parallelLevel"] = 0
    out["deviceType"] = "gpu" if gpu else "cpu"
    if held:
        out["deviceIds"] = held
    elif isinstance(raw.get("deviceIds"), list):
        out["deviceIds"] = raw["deviceIds"]
    out["continuousBatching"] = config.continuous_batching
    out["useJobTicket"] = False  # refused at load
    out["useVenv"] = bool(raw.get("useVenv", False))
    out["stateful"] = config.sequence_batching
    out["sequenceMaxIdleMSec"] = _whole(config.sequence_max_idle_ms)  # TorchServe: integers
    out["sequenceTimeoutMSec"] = _whole(config.sequence_timeout_ms)
    out["maxNumSequence"] = config.max_num_sequences
    out["maxSequenceJobQueueSize"] = config.max_sequence_queue_size
    out["loadedAtStartup"] = d.loaded_at_startup
    out["workers"] = [_worker(w) for w in d.workers]
    pending = d.pending
    out["jobQueueStatus"] = {
        "remainingCapacity": max(config.max_queue_size - pending, 0),
        "pendingRequests": pending,
    }
    # Podium's additions
    out["jobQueueSize"] = config.max_queue_size
    out["default"] = d.default
    out["state"] = d.state.value
    out["ready"] = d.ready
    out["workerKind"] = config.workers
    out["devices"] = config.devices if isinstance(config.devices, str) else list(config.devices)
    out["queue"] = d.queue
    if d.reason:
        out["loadError" if d.state is ModelState.FAILED else "reason"] = d.reason
    if d.trouble:
        out["trouble"] = d.trouble
    return out


def _whole(value: float) -> float | int:
    """A number as an integer when it is one."""
    return int(value) if float(value).is_integer() else value


def _worker(w: WorkerDescription) -> dict[str, Any]:
    return {
        "id": w.id,
        "startTime": iso_utc(w.started),
        "status": w.state.upper(),
        # resident bytes of the worker's process: for a thread worker, the server's (shared)
        "memoryUsage": w.memory if w.memory is not None else 0,
        "pid": w.pid,
        "gpu": bool(w.devices),
        "gpuUsage": _gpu_usage(w),
        # Podium's additions
        "kind": w.kind,
        "busy": w.busy,
        "devices": w.devices,  # GPU numbers (none: the CPU)
        "device": w.device,  # its model's podium.device(), in the server's numbering
        "deviceMemory": w.device_memory,  # bytes its process holds on them; null: unknown
    }


def _gpu_usage(w: WorkerDescription) -> str:
    """TorchServe's ``gpuUsage`` text for a worker on a GPU (``gpuId::0 memory.used
    [MiB]::678 MiB``: what its process holds there), ``N/A`` elsewhere."""
    if not w.devices:
        return "N/A"
    text = f"gpuId::{','.join(map(str, w.devices))}"
    if w.device_memory is not None:
        text += f" memory.used [MiB]::{w.device_memory >> 20} MiB"
    return text


def _one_version(version: str | None, action: str) -> None:
    """``all`` is a version only to describe (TorchServe's ``/models/{m}/all``), on either wire."""
    if version == "all":
        raise InvalidInput(f"cannot {action} version 'all': 'all' names no version; name one")
