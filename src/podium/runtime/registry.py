"""The registry: models × versions, their state, and the default version of each model."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..config import ModelConfig
from ..errors import (
    ModelNotReady,
    NotFound,
    PodiumError,
    VersionNotFound,
    model_label,
    unknown_model,
)
from ..metrics import recording_to
from ..model import Owned, release_all
from ..types import ModelInstance, ModelState
from ._cache import ResponseCache
from ._scheduler import Scheduler
from ._stats import VersionStats
from .workers import WorkerInfo, WorkerKind, WorkerPool, WorkerState

__all__ = [
    "UNVERSIONED",
    "ModelState",
    "ModelVersion",
    "Registry",
    "cache_refusal",
    "version_key",
]

#: Seconds that requests in flight get to finish when a version is removed.
REMOVE_GRACE = 10.0

#: The version an unversioned model also answers to, and lists in its metadata: Triton's
#: default, so that clients that pin ``model_version="1"`` reach it.
UNVERSIONED = "1"

logger = logging.getLogger("podium.registry")


def version_key(version: str | None) -> tuple[Any, ...]:
    """Numeric-aware ordering: "10" > "9", "1.10" > "1.9"; an unversioned model sorts lowest."""
    if version is None:
        return ((-1,),)
    return tuple(
        (0, int(p)) if p.isdigit() and p.isascii() and len(p) < 4000 else (1, p)
        for p in re.split(r"[.\-_]", version)
    )


#: Read off the enum once, for :meth:`Registry.ready` (every request): on Python 3.11 each read
#: of a member off its class goes through the enum type's ``__getattr__`` hook, which costs as
#: much as a function call.
_READY = ModelState.READY


@dataclass(slots=True, eq=False)
class ModelVersion:
    """One loaded version of a model: its workers, its scheduler and its state.

    ``instance`` describes the model to the front ends (its ``capabilities``);
    ``pool`` runs its workers (``min_workers`` of them, threads or processes). A version is
    READY once its ``min_workers`` workers are; with ``min_workers`` 0 it is READY with no
    worker, and its requests get 503 until it is scaled up. ``stats`` are its counters (its
    pool's: what its workers, its scheduler and the data plane record).
    """

    config: ModelConfig
    instance: ModelInstance
    scheduler: Scheduler
    state: ModelState = ModelState.LOADING
    reason: str = ""
    source: str = ""
    _loaded: asyncio.Event = field(default_factory=asyncio.Event)
    pool: WorkerPool | None = None
    #: What Podium made on disk for this version (its archive's extraction, its download),
    #: let go of by :meth:`release` once the version is removed.
    owned: list[Owned] = field(default_factory=list)
    stats: VersionStats = field(init=False)
    #: Its answers, when its config asks for a response cache and it may have one
    #: (:func:`cache_refusal`); emptied when it is unloaded, reloaded or removed.
    cache: ResponseCache | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        pool = self._workers_pool()
        self.stats = pool.stats if pool is not None else VersionStats()
        settings = self.config.response_cache
        if settings is not None:
            refusal = cache_refusal(self)
            if refusal:
                logger.warning("%s: response_cache is off: %s", self.label, refusal)
            else:
                self.cache = ResponseCache(settings)

    def forget_answers(self) -> None:
        """Empty its response cache (it answers differently from now on, or not at all)."""
        if self.cache is not None:
            self.cache.clear()

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def version(self) -> str | None:
        return self.config.version

    @property
    def label(self) -> str:
        return model_label(self.config.name, self.config.version)

    async def load(self) -> None:
        """Run the model's ``load()``; a failure marks this version FAILED with the reason.
        The time it took is :attr:`VersionStats.load_ns`."""
        start = time.perf_counter_ns()
        try:
            if self.pool is not None:
                self.pool.on_failed = self._failed
                await self.pool.start()
            else:
                with recording_to(self.stats.custom):
                    await self.instance.load()
            await self.scheduler.start()
        except Exception as exc:  # the model stays registered, reported not ready
            self.state = ModelState.FAILED
            self.reason = f"load() raised {type(exc).__name__}: {exc}"
            logger.error("%s failed to load: %s", self.label, self.reason, exc_info=exc)
        else:
            self.state = ModelState.READY
            self.stats.load_ns = time.perf_counter_ns() - start
            logger.info("%s is ready", self.label)
        finally:
            self._loaded.set()

    def _failed(self, reason: str) -> None:
        """Its workers cannot be restarted: the version is FAILED with the reason."""
        self.state = ModelState.FAILED
        self.reason = reason
        logger.error("%s failed: %s", self.label, reason)

    def _workers_pool(self) -> WorkerPool | None:
        return self.pool or getattr(self.scheduler, "pool", None)

    def workers(self) -> list[WorkerInfo]:
        """Every worker of this version, with its state, pid and the requests it holds."""
        pool = self._workers_pool()
        if pool is None:
            busy = self.scheduler.statistics().get("busy", 0)
            return [WorkerInfo("1", os.getpid(), WorkerKind.THREAD, WorkerState.READY, busy, 0.0)]
        return pool.infos()

    async def scale(self, min_workers: int, max_workers: int | None = None) -> None:
        """Run ``min_workers`` workers; returns once it does (removed workers finish what they
        hold first). ``InvalidInput`` for bad numbers."""
        pool = self._workers_pool()
        if pool is None:
            raise PodiumError(f"{self.label} cannot be scaled: it runs one given instance")
        await pool.scale(min_workers, max_workers)
        if self.state is ModelState.FAILED and pool.counts()["ready_workers"] >= pool.min_workers:
            self.state = ModelState.READY
            self.reason = ""

    def trouble(self) -> str:
        """Why this version, though READY, does not serve well, or ``""``: every worker stuck
        past ``response_timeout``, or workers lost again and again (:meth:`WorkerPool.trouble`).
        Its readiness then says false, with this reason; its requests are still taken (it may
        recover by itself, and one bad request must not take it out of service)."""
        if self.state is not ModelState.READY:
            return ""
        pool = self._workers_pool()
        return "" if pool is None else pool.trouble()

    def statistics(self) -> dict[str, int]:
        """Queue depth ("waiting", and "queued" when batching), "busy", "slots", "workers",
        "ready_workers", "in_flight" (requests in its scheduler)."""
        stats = dict(self.scheduler.statistics())
        stats["in_flight"] = getattr(self.scheduler, "in_flight", 0)
        pool = self._workers_pool()
        if pool is not None:
            stats.update(pool.counts())
        return stats

    async def drain(self) -> None:
        """Return once no request is running or waiting in this version."""
        drain = getattr(self.scheduler, "drain", None)
        if drain is not None:
            await drain()

    async def close(self) -> None:
        """Stop its scheduler and its workers (worker processes exit)."""
        await self.scheduler.close()

    async def release(self) -> None:
        """Let go of what this version owns (:attr:`owned`): what no other version holds is
        deleted (off the event loop). For a version removed or never registered, once it is
        closed; later calls do nothing."""
        owned, self.owned = self.owned, []
        if owned:
            await asyncio.to_thread(release_all, owned)

    async def reload(self) -> None:
        """Make this version serve again if it does not: a FAILED or UNLOADED version runs its
        ``load()`` again (on the same instance), a LOADING one is waited for, a READY one is left
        as it is."""
        if self.state is ModelState.LOADING:
            await self._loaded.wait()
            return
        if self.state is ModelState.READY:
            return
        self.forget_answers()
        self.state = ModelState.LOADING
        self.reason = ""
        self._loaded = asyncio.Event()
        await self.load()

    async def unload(self) -> None:
        """Stop serving this version: new requests get ``ModelNotReady``; requests already
        running finish. The instance stays in memory (the model contract has no hook to free
        it yet), so a later :meth:`reload` runs its ``load()`` again on it."""
        if self.state is ModelState.LOADING:
            await self._loaded.wait()
        self.state = ModelState.UNLOADED
        self.reason = "unloaded on request"
        self.forget_answers()
        logger.info("%s is unloaded", self.label)

    def check_ready(self) -> None:
        if self.state is ModelState.READY:
            return
        if self.state is ModelState.LOADING:
            raise ModelNotReady(f"{self.label} is not ready: it is still loading")
        if self.state is ModelState.UNLOADED:
            raise ModelNotReady(f"{self.label} is not ready: it was unloaded")
        raise ModelNotReady(f"{self.label} is not ready: {self.reason}")


def cache_refusal(mv: ModelVersion) -> str:
    """Why ``mv`` may not have a response cache, or ``""``: its answers depend on more than
    its inputs (a stateful sequence, the raw request) or come as a stream."""
    caps = mv.instance.capabilities
    config = mv.config
    if config.sequence_batching:
        return "a model with sequence_batching answers by its sequence's state"
    if config.continuous_batching or caps.streaming or caps.continuous or caps.consumes_stream:
        return "a streaming model's answers are not cached"
    if caps.needs_request and not caps.request_headers_only:
        return "a model that takes the raw request may answer by more than its inputs"
    if not caps.needs_inputs:
        return "a model that takes no inputs has nothing to key its answers by"
    return ""


class Registry:
    """All model versions, addressed by name and optional version."""

    def __init__(self) -> None:
        self._models: dict[str, dict[str | None, ModelVersion]] = {}
        self._defaults: dict[str, str | None] = {}
        self._default_cache: dict[str, ModelVersion] = {}

    def add(self, mv: ModelVersion) -> None:
        versions = self._models.setdefault(mv.name, {})
        if mv.version in versions:
            raise PodiumError(
                f"{mv.label} is registered twice ({versions[mv.version].source}, {mv.source})"
            )
        versions[mv.version] = mv
        self._default_cache.pop(mv.name, None)

    def set_default(self, name: str, version: str) -> None:
        """Make ``version`` the default for ``name`` (otherwise the highest version is)."""
        mv = self.get(name, version)
        if mv.version is None:  # "1" of an unversioned model: its one version
            self._defaults.pop(name, None)
        else:
            self._defaults[name] = mv.version
        self._default_cache.pop(name, None)

    def __iter__(self) -> Iterator[ModelVersion]:
        for versions in self._models.values():
            yield from versions.values()

    def names(self) -> list[str]:
        return sorted(self._models)

    def versions(self, name: str) -> list[ModelVersion]:
        """Every version of ``name``, lowest first; ``NotFound`` if the model is unknown."""
        versions = self._models.get(name)
        if not versions:
            raise NotFound(unknown_model(name))
        return sorted(versions.values(), key=lambda mv: version_key(mv.version))

    def default_version(self, name: str) -> ModelVersion:
        """The configured default version, else the highest; ``NotFound`` if unknown."""
        cached = self._default_cache.get(name)
        if cached is not None:
            return cached
        self._default_cache[name] = found = self._pick_default(name)
        return found

    def _pick_default(self, name: str) -> ModelVersion:
        versions = self.versions(name)
        chosen = self._defaults.get(name)
        if chosen is not None:
            return self._models[name][chosen]
        return versions[-1]

    def get(self, name: str, version: str | None = None) -> ModelVersion:
        """The version asked for, or the default one; ``NotFound`` names the model and version.

        A version is found by its name; an unversioned model also answers to
        :data:`UNVERSIONED` ("1"). A versioned model's "1" is its version named "1", if any.
        """
        if not version:
            return self.default_version(name)
        versions = self._models.get(name)
        if not versions:
            raise NotFound(unknown_model(name))
        mv = versions.get(version)
        if mv is None:
            if version == UNVERSIONED and None in versions:
                return versions[None]
            known = ", ".join(
                v.version or f"{UNVERSIONED} (unversioned)" for v in self.versions(name)
            )
            raise VersionNotFound(f"{unknown_model(name, version)} (versions: {known})")
        return mv

    def ready(self, name: str, version: str | None = None) -> ModelVersion:
        """Like :meth:`get`, and ``ModelNotReady`` (503) unless that version is ready."""
        # the default version's memory read here: every call that names no version (most of
        # them) passes, and :meth:`get` and :meth:`default_version` are two calls more
        mv = None if version else self._default_cache.get(name)
        if mv is None:
            mv = self.get(name, version)
        if mv.state is not _READY:
            mv.check_ready()
        return mv

    async def load(self, name: str) -> list[ModelVersion]:
        """(Re)load every version of ``name`` that is not serving (:meth:`ModelVersion.reload`);
        ``NotFound`` if the model is unknown. Failures are recorded in each version's state."""
        versions = self.versions(name)
        await asyncio.gather(*(mv.reload() for mv in versions))
        return versions

    async def unload(self, name: str) -> list[ModelVersion]:
        """Stop serving every version of ``name`` (:meth:`ModelVersion.unload`); ``NotFound``
        if the model is unknown."""
        versions = self.versions(name)
        for mv in versions:
            await mv.unload()
        return versions

    async def load_all(self) -> None:
        """Load every version concurrently; failures are recorded, not raised."""
        await asyncio.gather(*(mv.load() for mv in self if mv.state is ModelState.LOADING))

    async def remove(self, name: str, version: str | None = None) -> list[ModelVersion]:
        """Unregister ``version`` of ``name`` (every version when None): new requests get
        ``NotFound`` at once, requests in flight finish (for up to REMOVE_GRACE seconds), then
        its workers stop, then what it owns is released (:meth:`ModelVersion.release`).
        ``NotFound`` if unknown."""
        removed = [self.get(name, version)] if version else self.versions(name)
        versions = self._models[name]
        for mv in removed:
            versions.pop(mv.version, None)
        if not versions:
            del self._models[name]
            self._defaults.pop(name, None)
        elif self._defaults.get(name) in {mv.version for mv in removed}:
            del self._defaults[name]
        self._default_cache.pop(name, None)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(REMOVE_GRACE):
                await asyncio.gather(*(mv.drain() for mv in removed))
        await asyncio.gather(*(mv.close() for mv in removed), return_exceptions=True)
        for mv in removed:
            mv.state = ModelState.UNLOADED
            mv.reason = "removed"
            mv.forget_answers()
            await mv.release()  # its workers stopped: its extraction or download may go
        return removed

    async def close(self) -> None:
        await asyncio.gather(*(mv.close() for mv in self), return_exceptions=True)
