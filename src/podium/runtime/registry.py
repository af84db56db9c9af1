"""The registry: models × versions, their state, and the default version of each model."""

from __future__ import annotations

import asyncio
import enum
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..config import ModelConfig
from ..errors import ModelNotReady, NotFound, PodiumError
from ..types import ModelInstance
from ._scheduler import Scheduler

__all__ = ["ModelState", "ModelVersion", "Registry", "version_key"]

logger = logging.getLogger("podium.registry")


class ModelState(enum.Enum):
    LOADING = "loading"
    READY = "ready"
    FAILED = "failed"
    UNLOADED = "unloaded"  # taken out of service on request (Registry.unload); loads again


def version_key(version: str | None) -> tuple[Any, ...]:
    """Numeric-aware ordering: "10" > "9", "1.10" > "1.9"; an unversioned model sorts lowest."""
    if version is None:
        return ((-1,),)
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"[.\-_]", version))


@dataclass(slots=True, eq=False)
class ModelVersion:
    """One loaded version of a model: its instance, its scheduler and its state."""

    config: ModelConfig
    instance: ModelInstance
    scheduler: Scheduler
    state: ModelState = ModelState.LOADING
    reason: str = ""
    source: str = ""
    _loaded: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def version(self) -> str | None:
        return self.config.version

    @property
    def label(self) -> str:
        return f"model '{self.name}'" + (f" version '{self.version}'" if self.version else "")

    async def load(self) -> None:
        """Run the model's ``load()``; a failure marks this version FAILED with the reason."""
        try:
            await self.instance.load()
            await self.scheduler.start()
        except Exception as exc:  # the model stays registered, reported not ready
            self.state = ModelState.FAILED
            self.reason = f"load() raised {type(exc).__name__}: {exc}"
            logger.error("%s failed to load: %s", self.label, self.reason, exc_info=exc)
        else:
            self.state = ModelState.READY
            logger.info("%s is ready", self.label)
        finally:
            self._loaded.set()

    async def reload(self) -> None:
        """Make this version serve again if it does not: a FAILED or UNLOADED version runs its
        ``load()`` again (on the same instance), a LOADING one is waited for, a READY one is left
        as it is."""
        if self.state is ModelState.LOADING:
            await self._loaded.wait()
            return
        if self.state is ModelState.READY:
            return
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
        logger.info("%s is unloaded", self.label)

    def check_ready(self) -> None:
        if self.state is ModelState.READY:
            return
        if self.state is ModelState.LOADING:
            raise ModelNotReady(f"{self.label} is not ready: it is still loading")
        if self.state is ModelState.UNLOADED:
            raise ModelNotReady(f"{self.label} is not ready: it was unloaded")
        raise ModelNotReady(f"{self.label} is not ready: {self.reason}")


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
        self.get(name, version)
        self._defaults[name] = version
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
            raise NotFound(f"model '{name}' is not known")
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
        """The version asked for, or the default one; ``NotFound`` names the model and version."""
        if not version:
            return self.default_version(name)
        versions = self._models.get(name)
        if not versions:
            raise NotFound(f"model '{name}' version '{version}' is not known: no model '{name}'")
        mv = versions.get(version)
        if mv is None:
            known = ", ".join(v.version or "(unversioned)" for v in self.versions(name))
            raise NotFound(f"model '{name}' has no version '{version}' (versions: {known})")
        return mv

    def ready(self, name: str, version: str | None = None) -> ModelVersion:
        """Like :meth:`get`, and ``ModelNotReady`` (503) unless that version is ready."""
        mv = self.get(name, version)
        if mv.state is not ModelState.READY:
            mv.check_ready()
        return mv

    def all_ready(self) -> bool:
        """Whether every version that should serve does (an unloaded one is not counted)."""
        return all(
            mv.state is ModelState.READY for mv in self if mv.state is not ModelState.UNLOADED
        )

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

    async def close(self) -> None:
        await asyncio.gather(*(mv.scheduler.close() for mv in self), return_exceptions=True)
