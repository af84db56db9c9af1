"""What the management API does, shared by the REST app and the gRPC service.

Each operation returns a :class:`Reply`: the HTTP status (200, or 202 when work goes on in the
background) and the JSON body TorchServe sends (the gRPC ``msg`` carries the same JSON).
Failures are :mod:`podium.errors` exceptions; the front ends map them through the one table.

Registration builds the model off the event loop (importing user code runs it), then adds its
versions to the registry on the loop (so a conflict check and the add cannot interleave with
another registration), then loads them: awaited (``synchronous``, the REST default) or in a
background task this object owns and cancels on :meth:`Management.close`.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import os
import time
from collections.abc import Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import Conflict, DefinitionError, InvalidInput, NotFound, PodiumError
from ...runtime.loading import build_path
from ...runtime.registry import ModelState, ModelVersion, Registry
from ...runtime.workers import RequestCodec
from ._params import Registration, Scaling
from ._urls import UrlPolicy

__all__ = ["Management", "Reply"]

logger = logging.getLogger("podium.management")

#: The status TorchServe answers when work goes on in the background (HTTP 202).
PROCESSING = "Processing worker updates..."


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: Any


def _status(text: str, status: int = 200) -> Reply:
    return Reply(status, {"status": text})


def _iso(epoch: float) -> str:
    moment = datetime.datetime.fromtimestamp(epoch, datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Management:
    """The management operations over one registry (see the module docstring)."""

    def __init__(
        self,
        registry: Registry,
        *,
        urls: UrlPolicy,
        secrets: Mapping[str, str],
        executor: Executor,
        codec: RequestCodec | None = None,
    ) -> None:
        self.registry = registry
        self.urls = urls
        self.secrets = secrets
        self.executor = executor
        self.codec = codec  # carries request objects into process workers
        self._registered: dict[tuple[str, str | None], str] = {}  # url of each API registration
        self._scaled: dict[tuple[str, str | None], tuple[int, int]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._loading: dict[int, asyncio.Task[None]] = {}  # id(mv) → its background load
        self._started = {id(mv): _now() for mv in registry}

    async def close(self) -> None:
        """Cancel the background work (loads, scaling) and wait for it to end."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _spawn(self, coro: Any, what: str) -> asyncio.Task[None]:
        async def run() -> None:
            try:
                await coro
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # nobody awaits a background task's result: log it
                logger.error("%s failed: %s", what, exc, exc_info=exc)

        task = asyncio.get_running_loop().create_task(run(), name=what)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- register --------------------------------------------------------------------------

    async def register(self, request: Registration) -> Reply:
        """``POST /models``: find (or download) ``url``, build, register and load the model."""
        downloaded: Path | None = None
        if self.urls.is_remote(request.url):
            self.urls.check_remote(request.url)  # before anything else: refused is refused
            path = downloaded = await self.urls.download(request.url)
        else:
            path = self.urls.local(request.url)
        try:
            versions = await self._build(path, request)
            name = self._add(versions, request.url)
            if downloaded is not None:  # the file goes when the last of its versions does
                holds = self.urls.owned(downloaded, len(versions))
                for mv, hold in zip(versions, holds, strict=True):
                    mv.owned.append(hold)
        except BaseException:
            if downloaded is not None:  # a failed registration leaves no file behind
                with contextlib.suppress(OSError):
                    os.unlink(downloaded)
            raise
        labels = ", ".join(mv.version for mv in versions if mv.version)
        workers = max(mv.config.min_workers for mv in versions)
        if not request.synchronous:
            for mv in versions:
                self._loading[id(mv)] = self._spawn(self._load(mv), f"loading {mv.label}")
            return _status(PROCESSING, 202)
        await asyncio.gather(*(mv.load() for mv in versions))
        failed = [mv for mv in versions if mv.state is ModelState.FAILED]
        if failed:
            # As TorchServe: a model whose workers cannot start is not left registered.
            reasons = "; ".join(f"{mv.label} failed to load: {mv.reason}" for mv in failed)
            await self._remove(name, versions)
            raise PodiumError(f"{reasons}; the model was not registered")
        version = f" Version: {labels}" if labels else ""
        return _status(f'Model "{name}"{version} registered with {workers} initial workers')

    async def _build(self, path: Path, request: Registration) -> list[ModelVersion]:
        overrides = request.overrides()
        loop = asyncio.get_running_loop()
        try:
            versions = await loop.run_in_executor(
                self.executor,
                lambda: build_path(
                    path, overrides, secrets=self.secrets, executor=self.executor, codec=self.codec
                ),
            )
        except DefinitionError as exc:  # the client's model is wrong: a bad request
            raise InvalidInput(f"cannot register '{request.url}': {exc.message}") from exc
        if not versions:
            raise InvalidInput(f"cannot register '{request.url}': it holds no model")
        names = sorted({mv.name for mv in versions})
        if len(names) > 1:
            await _close(versions)
            raise InvalidInput(
                f"cannot register '{request.url}': it holds several models ({', '.join(names)}); "
                "register one model per request"
            )
        return versions

    def _add(self, versions: list[ModelVersion], url: str) -> str:
        """Add ``versions`` (one model) to the registry, or raise ``Conflict``; no await here,
        so no other registration can come in between the check and the add."""
        name = versions[0].name
        try:
            existing = {mv.version for mv in self.registry.versions(name)}
        except NotFound:
            existing = set()
        new = {mv.version for mv in versions}
        clash = existing & new
        if clash or (existing and (None in existing or None in new)):
            self._discard(versions)
            if clash and None not in clash:
                which = ", ".join(f"'{v}'" for v in sorted(v for v in clash if v is not None))
                raise Conflict(f"model '{name}' version {which} is already registered")
            raise Conflict(f"model '{name}' is already registered")
        for mv in versions:
            self.registry.add(mv)
            self._registered[(mv.name, mv.version)] = url
            self._started[id(mv)] = _now()
        defaults = {mv.config.default_version for mv in versions if mv.config.default_version}
        if len(defaults) == 1:  # build_path checked that they agree
            self.registry.set_default(name, defaults.pop())
        return name

    def _discard(self, versions: list[ModelVersion]) -> None:
        self._spawn(_close(versions), "closing unregistered versions")

    async def _load(self, mv: ModelVersion) -> None:
        try:
            await mv.load()
        finally:
            self._loading.pop(id(mv), None)

    # -- unregister ------------------------------------------------------------------------

    async def unregister(self, name: str, version: str | None = None) -> Reply:
        """``DELETE /models/{m}[/{v}]``: every version of the model, or the one named. New
        requests get 404 at once; requests in flight finish first."""
        versions = [self.registry.get(name, version)] if version else self.registry.versions(name)
        for mv in versions:
            loading = self._loading.pop(id(mv), None)
            if loading is not None:
                loading.cancel()
                await asyncio.gather(loading, return_exceptions=True)
        await self._remove(name, versions, version)
        return _status(f'Model "{name}" unregistered')

    async def _remove(
        self, name: str, versions: list[ModelVersion], version: str | None = None
    ) -> None:
        if version is None and len(versions) < len(self.registry.versions(name)):
            for mv in versions:  # a subset (a failed registration): one by one
                await self.registry.remove(name, mv.version)
        else:
            await self.registry.remove(name, version)
        for mv in versions:
            self._registered.pop((name, mv.version), None)
            self._scaled.pop((name, mv.version), None)
            self._started.pop(id(mv), None)

    # -- scale, set-default ----------------------------------------------------------------

    async def scale(self, name: str, version: str | None, request: Scaling) -> Reply:
        """``PUT /models/{m}[/{v}]``: run ``min_workers`` workers (at most ``max_workers``)."""
        mv = self.registry.get(name, version or request.version)
        scale = mv.scale
        self._scaled[(mv.name, mv.version)] = (request.min_workers, request.max_workers)
        if not request.synchronous:
            self._spawn(scale(request.min_workers, request.max_workers), f"scaling {mv.label}")
            return _status(PROCESSING, 202)
        await scale(request.min_workers, request.max_workers)
        text = f"Workers scaled to {request.min_workers} for model: {mv.name}"
        if mv.version:
            text += f", version: {mv.version}"
        return _status(text)

    def set_default(self, name: str, version: str) -> Reply:
        """``PUT /models/{m}/{v}/set-default``."""
        self.registry.set_default(name, version)
        return _status(f'Default version successfully updated for model "{name}" to "{version}"')

    # -- list, describe --------------------------------------------------------------------

    def list_models(self, limit: int, token: int) -> Reply:
        """``GET /models``: the default version of each model, by name, a page at a time."""
        names = self.registry.names()
        page = names[token : token + limit]
        body: dict[str, Any] = {}
        if token + limit < len(names):
            body["nextPageToken"] = str(token + limit)
        body["models"] = [
            {"modelName": n, "modelUrl": self._url(self.registry.default_version(n))} for n in page
        ]
        return Reply(200, body)

    def describe(self, name: str, version: str | None = None) -> Reply:
        """``GET /models/{m}[/{v}|/all]``: TorchServe's description of each version, with
        Podium's additions (state, load error, default, queue, worker kind)."""
        if version == "all":
            versions = self.registry.versions(name)
        else:
            versions = [self.registry.get(name, version)]
        default = self.registry.default_version(name)
        return Reply(200, [self._describe(mv, mv is default) for mv in versions])

    def _url(self, mv: ModelVersion) -> str:
        return self._registered.get((mv.name, mv.version), mv.source)

    def _describe(self, mv: ModelVersion, is_default: bool) -> dict[str, Any]:
        config = mv.config
        low, high = self._scaled.get(
            (mv.name, mv.version), (config.min_workers, config.max_workers)
        )
        out: dict[str, Any] = {
            "modelName": mv.name,
            "modelVersion": mv.version,
            "modelUrl": self._url(mv),
            "runtime": "python",
            "minWorkers": low,
            "maxWorkers": high,
            "batchSize": config.batch_size,
            "maxBatchDelay": config.max_batch_delay,
            "responseTimeout": config.response_timeout,
            "jobQueueSize": config.max_queue_size,
            "loadedAtStartup": (mv.name, mv.version) not in self._registered,
            "workers": self._workers(mv),
            # Podium's additions
            "default": is_default,
            "state": mv.state.value,
            "workerKind": config.workers,
            "queue": _statistics(mv),
        }
        if mv.reason:
            out["loadError" if mv.state is ModelState.FAILED else "reason"] = mv.reason
        return out

    def _workers(self, mv: ModelVersion) -> list[dict[str, Any]]:
        out = []
        for info in mv.workers():
            entry: dict[str, Any] = {
                "id": str(info.id),
                "startTime": _iso(info.started or self._started.get(id(mv), _now())),
                "status": info.state.upper(),
                "pid": info.pid,
                "gpu": False,
                "kind": info.kind,
                "busy": info.busy,
            }
            memory = _memory(info.pid) if info.kind == "process" else None
            if memory is not None:
                entry["memoryUsage"] = memory
            out.append(entry)
        return out


def _now() -> float:
    return time.time()


def _statistics(mv: ModelVersion) -> dict[str, int]:
    return dict(mv.statistics())


def _memory(pid: int | None) -> int | None:
    """Resident memory of process ``pid`` in bytes (Linux), else None."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as f:
            resident = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return resident * os.sysconf("SC_PAGE_SIZE")


async def _close(versions: list[ModelVersion]) -> None:
    """Close versions that were built but never registered, and release what they own."""
    await asyncio.gather(*(mv.close() for mv in versions), return_exceptions=True)
    await asyncio.gather(*(mv.release() for mv in versions))
