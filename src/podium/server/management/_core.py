"""What the management API does, shared by the REST app and the gRPC service.

Each operation returns an :class:`Outcome`: the HTTP status (200, or 202 when work goes on in the
background) and the JSON body TorchServe sends (the gRPC ``msg`` carries the same JSON).
Failures are :mod:`podium.errors` exceptions; the front ends map them through the one table.

The work is the data plane's :class:`~podium.dataplane.ModelRepository`'s: this module resolves
a registration's ``url`` (the model store, the ``--allowed-urls`` policy, downloads) and renders
the repository's typed answers as TorchServe's JSON.
"""

from __future__ import annotations

import contextlib
import datetime
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...dataplane import ModelRepository, VersionDescription, WorkerDescription
from ...types import ModelState
from ._params import Registration, Scaling
from ._urls import UrlPolicy

__all__ = ["Management", "Outcome"]

#: The status TorchServe answers when work goes on in the background (HTTP 202).
PROCESSING = "Processing worker updates..."


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a management operation answers: the HTTP status and TorchServe's JSON body (not a
    model's :class:`podium.types.Reply`)."""

    status: int
    body: Any


def _status(text: str, status: int = 200) -> Outcome:
    return Outcome(status, {"status": text})


def _iso(epoch: float) -> str:
    moment = datetime.datetime.fromtimestamp(epoch, datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Management:
    """The management operations over one model repository (see the module docstring)."""

    def __init__(self, repository: ModelRepository, *, urls: UrlPolicy) -> None:
        self.repository = repository
        self.urls = urls

    # -- register --------------------------------------------------------------------------

    async def register(self, request: Registration) -> Outcome:
        """``POST /models``: find (or download) ``url``, build, register and load the model."""
        downloaded: Path | None = None
        if self.urls.is_remote(request.url):
            self.urls.check_remote(request.url)  # before anything else: refused is refused
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
        await self.repository.unregister(name, version)
        return _status(f'Model "{name}" unregistered')

    # -- scale, set-default ----------------------------------------------------------------

    async def scale(self, name: str, version: str | None, request: Scaling) -> Outcome:
        """``PUT /models/{m}[/{v}]``: run ``min_workers`` workers (at most ``max_workers``)."""
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


def _describe(d: VersionDescription) -> dict[str, Any]:
    config = d.config
    out: dict[str, Any] = {
        "modelName": d.name,
        "modelVersion": d.version,
        "modelUrl": d.url,
        "runtime": "python",
        "minWorkers": d.min_workers,
        "maxWorkers": d.max_workers,
        "batchSize": config.batch_size,
        "maxBatchDelay": config.max_batch_delay_ms,
        "responseTimeout": config.response_timeout_s,
        "jobQueueSize": config.max_queue_size,
        "loadedAtStartup": d.loaded_at_startup,
        "workers": [_worker(w) for w in d.workers],
        # Podium's additions
        "default": d.default,
        "state": d.state.value,
        "ready": d.ready,
        "workerKind": config.workers,
        "queue": d.queue,
    }
    if d.reason:
        out["loadError" if d.state is ModelState.FAILED else "reason"] = d.reason
    if d.trouble:
        out["trouble"] = d.trouble
    return out


def _worker(w: WorkerDescription) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "id": w.id,
        "startTime": _iso(w.started),
        "status": w.state.upper(),
        "pid": w.pid,
        "gpu": False,
        "kind": w.kind,
        "busy": w.busy,
    }
    if w.memory is not None:
        entry["memoryUsage"] = w.memory
    return entry
