"""The model repository: which models are served, and every operation that changes that.

One object, owned by the data plane, for every front end that lists or changes models: OIP's repository extension (index,
load, unload) and TorchServe's management API (register, unregister, scale, set-default, list,
describe). Answers are typed (:class:`podium.types.RepositoryModel` and the descriptions below);
each front end renders them in its own format. Failures are :mod:`podium.errors` exceptions.

Registration builds the model off the event loop (importing user code runs it), then adds its
versions to the registry on the loop (so a conflict check and the add cannot interleave with
another registration); :meth:`ModelRepository.load_registered` then loads them: awaited
(``synchronous``) or in a background task this object owns and cancels on
:meth:`ModelRepository.close`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Mapping
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

import msgspec

from ..config import ModelConfig
from ..errors import (
    Conflict,
    DefinitionError,
    InvalidInput,
    ModelError,
    NotFound,
    PodiumError,
    model_label,
)
from ..model import Owned
from ..model.torchserve import ArchiveLimits, set_archive_limits
from ..runtime import (
    UNVERSIONED,
    ModelSettings,
    ModelVersion,
    Registry,
    RequestCodec,
    TaskSet,
    build_path,
    inventory,
    register_paths,
)
from ..types import Capabilities, ModelState, RepositoryModel, WireProtocol
from ._control import ControlPolicy
from ._model_config import ModelConfiguration, configuration, overlay
from ._remote import RemoteInstance, RemoteScheduler

__all__ = [
    "ConfigOverrides",
    "ModelEntry",
    "ModelRepository",
    "Registered",
    "Scaled",
    "VersionDescription",
    "WorkerDescription",
]

logger = logging.getLogger("podium.repository")
_now = time.time  # when a version or worker started, as descriptions say it (epoch seconds)


class ConfigOverrides(msgspec.Struct, frozen=True, kw_only=True):
    """Settings a registration gives in place of the model's own config (None: the config's)."""

    name: str | None = None
    batch_size: int | None = None
    max_batch_delay_ms: float | None = None
    min_workers: int | None = None
    response_timeout_s: float | None = None

    def fields(self) -> dict[str, Any]:
        """The ``ModelConfig`` fields these replace, with their values."""
        values = {name: getattr(self, name) for name in self.__struct_fields__}
        return {name: value for name, value in values.items() if value is not None}


class ModelEntry(msgspec.Struct, frozen=True):
    """A model in a listing: its name and where its default version came from."""

    name: str
    url: str


class Registered:
    """A registration's versions, added to the registry but not loaded yet
    (:meth:`ModelRepository.load_registered`): the model's ``name``, its ``versions`` and the
    ``workers`` each starts with."""

    __slots__ = ("name", "versions", "workers", "_added")

    def __init__(self, added: list[ModelVersion]) -> None:
        self.name = added[0].name
        self.versions: list[str | None] = [mv.version for mv in added]
        self.workers = max(mv.config.min_workers for mv in added)
        self._added = added

    def own(self, holds: list[Owned]) -> None:
        """Give each version one of ``holds`` (what Podium made on disk for the registration,
        such as a downloaded archive), released when that version is removed."""
        for mv, hold in zip(self._added, holds, strict=True):
            mv.owned.append(hold)


class Scaled(msgspec.Struct, frozen=True):
    """A scaled version (``pending``: its workers are still being started or stopped)."""

    name: str
    version: str | None
    pending: bool


class WorkerDescription(msgspec.Struct, frozen=True, kw_only=True):
    """One worker of a version: ``pid`` runs the model's code (the server's own for a thread
    worker), ``busy`` counts the requests it holds, ``started`` is in epoch seconds and
    ``memory`` is a worker process's resident memory in bytes (None where unknown); ``devices``,
    ``device``, ``device_memory``: its GPUs, device name and GPU bytes (docs/devices.md)."""

    id: str
    pid: int | None
    kind: str
    state: str
    busy: int
    started: float
    memory: int | None = None
    devices: list[int] = msgspec.field(default_factory=list)
    device: str = "cpu"
    device_memory: int | None = None


class VersionDescription(msgspec.Struct, frozen=True, kw_only=True):
    """One model version as the repository knows it.

    ``url``: what it was registered from (else its source on disk); ``min_workers`` /
    ``max_workers``: as last scaled, else as configured; ``loaded_at_startup``: found in the
    paths the server started with, not registered since; ``default``: the model's default
    version; ``queue``: the scheduler's and workers' counters; ``trouble``: why a READY version
    is not serving well (every worker stuck, workers crash-looping), else ``""``; ``ready``:
    whether its readiness says yes (READY and no trouble); ``device``: where the instance
    computes when its contract decides it (:attr:`podium.types.Capabilities.device`).
    """

    name: str
    version: str | None
    url: str
    config: ModelConfig
    min_workers: int
    max_workers: int
    loaded_at_startup: bool
    default: bool
    state: ModelState
    reason: str
    workers: list[WorkerDescription]
    queue: dict[str, int]
    trouble: str = ""
    device: str | None = None

    @property
    def ready(self) -> bool:
        return self.state is ModelState.READY and not self.trouble

    @property
    def pending(self) -> int:
        """Requests waiting in the version's queues, not running yet (the gate's line, and the
        scheduler's own: batches, sequences' turns, continuous batching's line)."""
        return self.queue.get("waiting", 0) + self.queue.get("queued", 0)


class ModelRepository:
    """The models of one registry and the operations on them (see the module docstring).

    ``secrets``, ``executor`` and ``codec`` are what models are built with: the secrets a model
    may read, the pool its sync code runs in, and how request objects reach worker processes.
    """

    def __init__(
        self,
        registry: Registry,
        *,
        secrets: Mapping[str, str] | None = None,
        executor: Executor | None = None,
        codec: RequestCodec | None = None,
    ) -> None:
        self._registry = registry
        self._secrets: Mapping[str, str] = secrets if secrets is not None else {}
        self._executor = executor
        self._codec = codec
        self._registered: dict[tuple[str, str | None], str] = {}  # url of each registration
        self._scaled: dict[tuple[str, str | None], tuple[int, int]] = {}
        self._tasks = TaskSet(logger)  # loads, scaling: in the asker's context, named, logged
        self._loading: dict[int, asyncio.Task[None]] = {}  # id(mv) → its background load
        self._started = {id(mv): _now() for mv in registry}
        self._given: dict[int, str] = {}  # id(mv) → its source as the paths given at start say
        self._serving = False  # start-up (load_all) has ended
        # id(mv) → the version and its config as found, while a load's config changes it.
        self._found: dict[int, tuple[ModelVersion, ModelConfig]] = {}
        #: Which listeners may load and unload models; the server sets it at start.
        self.control = ControlPolicy()
        #: ``ModelConfig`` fields every registration takes from the server's settings (what a
        #: TorchServe handler's metrics read: ``Logs.torchserve_fields``); the server sets it.
        self.registration_fields: Mapping[str, Any] = {}

    # -- start-up and shutdown -----------------------------------------------------------

    def add_paths(
        self,
        paths: list[Path],
        *,
        only: tuple[str, str | None] | None = None,
        overrides: Mapping[str, Any] | None = None,
        install_requirements: bool = False,
        settings: ModelSettings | None = None,
    ) -> None:
        """Discover and build every model under ``paths`` into the registry (``DefinitionError``
        lists every problem, and then none is added). Blocking (user code is imported and
        instantiated): call it off the event loop, before serving.

        ``only``: build just that version (name, version) of those found, importing no other
        model's code; ``overrides``: ``ModelConfig`` fields in place of each config's own
        (a Ray Serve replica runs one version with one worker: podium.ray);
        ``install_requirements``: a model that declares requirements runs from an environment of
        its own with them installed (``podium serve --install-model-requirements``);
        ``settings``: model settings from outside the models' files (``ModelSettings``)."""
        register_paths(
            self._registry,
            paths,
            secrets=self._secrets,
            executor=self._build_executor(),
            codec=self._codec,
            only=only,
            overrides=overrides,
            install_requirements=install_requirements,
            settings=settings,
        )
        now = _now()
        for mv in self._registry:
            if id(mv) not in self._started:
                self._started[id(mv)] = now
                self._given[id(mv)] = _as_given(mv.source, paths)

    def add_remote(self, config: ModelConfig, capabilities: Capabilities) -> ModelVersion:
        """Register a version whose model runs elsewhere (``dataplane/_remote.py``): ready at
        once, answering health, metadata and configuration from ``config`` and telling front ends
        what it asks for (``capabilities``); its calls must be forwarded by the data plane that
        holds it (podium.ray's ingress), as its scheduler runs nothing. The model's configured
        ``default_version`` applies. ``PodiumError`` if that version is registered already."""
        label = model_label(config.name, config.version)
        mv = ModelVersion(
            config,
            RemoteInstance(label, capabilities),
            RemoteScheduler(label),
            state=ModelState.READY,
            source=label,
        )
        self._registry.add(mv)
        self._started[id(mv)] = _now()
        if config.default_version is not None and config.default_version == config.version:
            self._registry.set_default(config.name, config.default_version)
        return mv

    async def load_all(self) -> None:
        """Load every version not loaded yet, concurrently; failures are recorded, not raised.
        The server's start-up ends here: from now on a load in progress does not make the
        server unready (:meth:`ready`)."""
        await self._registry.load_all()
        self._serving = True

    @staticmethod
    def set_archive_limits(max_size: int, max_ratio: float) -> None:
        """The limits every archive extracted in this process obeys (``--max-archive-size``,
        ``--max-archive-ratio``), start-up models' included."""
        set_archive_limits(ArchiveLimits(max_size, max_ratio))

    def ready(self) -> bool:
        """The server's readiness (``docs/protocols.md``, "Readiness"): no version failed, and
        none is loading before start-up ended (:meth:`load_all`). A version unloaded on request
        does not count, nor one loading while the server serves (registered, or loaded again):
        it counts once its load has ended, as ready or as failed."""
        serving = self._serving
        for mv in self._registry:
            state = mv.state
            if state is ModelState.READY or state is ModelState.UNLOADED:
                continue
            if state is ModelState.LOADING and serving:
                continue
            return False
        return True

    def versions(self) -> list[ModelVersion]:
        """Every version, model by model (for the server's start-up report)."""
        return list(self._registry)

    async def close(self) -> None:
        """Cancel the background work (loads, scaling) and wait for it to end."""
        await self._tasks.cancel()

    def _build_executor(self) -> Executor:
        if self._executor is None:
            raise PodiumError("this model repository has no executor to build models in")
        return self._executor

    # -- OIP's repository extension -------------------------------------------------------

    def index(self, *, ready_only: bool = False) -> list[RepositoryModel]:
        """Every version of every model, by name then version (only the ready ones with
        ``ready_only``)."""
        registry = self._registry
        return [
            RepositoryModel(mv.name, mv.version or UNVERSIONED, mv.state, mv.reason)
            for name in registry.names()
            for mv in registry.versions(name)
            if not ready_only or mv.state is ModelState.READY
        ]

    def check_control(self, action: str, via: WireProtocol | None) -> None:
        """Refuse ``action`` (``Forbidden``) unless the :attr:`control` policy lets a call
        through ``via`` (an inference front end; None: a management listener) change what is
        served. :meth:`load` and :meth:`unload` ask it themselves; a front end asks first too
        when it has more to check, so that a refused client learns nothing else."""
        self.control.check(action, via)

    async def load(self, name: str, *, via: WireProtocol | None, config: str | None = None) -> None:
        """Make every version of ``name`` serve again (a failed or unloaded one loads again);
        ``via``: the front end the call came through (:meth:`check_control`). ``Forbidden`` if
        it may not, ``NotFound`` if unknown, ``ModelError`` naming each version that failed.

        ``config``: Triton's ``ModelConfig`` as JSON (a load's ``config`` parameter), applied
        to every version as :func:`overlay` says (what the model declares of its tensors), in
        place of the config the version was found with; ``InvalidInput`` if it cannot be. A
        load without one puts the found config back, as Triton reads its repository again."""
        self.control.check(f"loading model '{name}'", via)
        try:
            versions = self._registry.versions(name)
        except NotFound as exc:
            raise NotFound(f"failed to load: {exc.message}") from None
        changed = []
        for mv in versions:
            entry = self._found.get(id(mv))
            base = entry[1] if entry is not None else mv.config  # the config as found
            try:
                new = base if config is None else overlay(base, self.configuration(mv), config)
            except InvalidInput as exc:
                raise InvalidInput(f"failed to load {mv.label}: {exc.message}") from None
            changed.append((mv, base, new))
        for mv, base, new in changed:  # all or none
            if config is None:
                self._found.pop(id(mv), None)
            else:
                self._found.setdefault(id(mv), (mv, base))
            mv.config = new
        for mv in versions:  # a load is a reload (Triton's): no answer of before is kept
            mv.forget_answers()
        versions = await self._registry.load(name)
        failed = [mv for mv in versions if mv.state is not ModelState.READY]
        if failed:
            reasons = "; ".join(f"{mv.label}: {mv.reason}" for mv in failed)
            raise ModelError(f"model '{name}' failed to load: {reasons}")

    def configuration(self, mv: ModelVersion) -> ModelConfiguration:
        """``mv``'s configuration as Triton's ``ModelConfig``, its workers as last scaled."""
        return configuration(mv, self._bounds(mv)[0])

    def _bounds(self, mv: ModelVersion) -> tuple[int, int]:
        """The version's (min_workers, max_workers): as last scaled, else its config's."""
        config = mv.config
        return self._scaled.get((mv.name, mv.version), (config.min_workers, config.max_workers))

    async def unload(self, name: str, *, via: WireProtocol | None) -> None:
        """Stop serving every version of ``name`` (requests in flight finish); ``via`` as for
        :meth:`load`. ``Forbidden`` if it may not, ``NotFound`` if unknown. The versions stay
        known and :meth:`load` brings them back."""
        self.control.check(f"unloading model '{name}'", via)
        await self._registry.unload(name)

    # -- register, unregister ---------------------------------------------------------------

    async def register(
        self, path: Path, *, url: str, overrides: ConfigOverrides | None = None
    ) -> Registered:
        """Build the model at ``path`` (registered as ``url``) with ``overrides`` in place of
        its config's values and add its versions, not loaded yet (:meth:`load_registered`).
        ``InvalidInput`` when ``path`` holds no model, several, or a broken one; ``Conflict``
        when a version is already registered."""
        versions = await self._build(path, url, overrides or ConfigOverrides())
        self._add(versions, url)
        return Registered(versions)

    async def load_registered(self, registered: Registered, *, synchronous: bool) -> None:
        """Load a registration's versions: awaited when ``synchronous`` (a version that fails
        to load leaves the model unregistered: ``PodiumError`` with the reasons), else in the
        background."""
        versions = registered._added
        if not synchronous:
            for mv in versions:
                self._loading[id(mv)] = self._tasks.spawn(self._load(mv), f"loading {mv.label}")
            return
        await asyncio.gather(*(mv.load() for mv in versions))
        failed = [mv for mv in versions if mv.state is ModelState.FAILED]
        if failed:
            # As TorchServe: a model whose workers cannot start is not left registered.
            reasons = "; ".join(f"{mv.label} failed to load: {mv.reason}" for mv in failed)
            await self._remove(registered.name, versions)
            raise PodiumError(f"{reasons}; the model was not registered")

    async def _build(self, path: Path, url: str, overrides: ConfigOverrides) -> list[ModelVersion]:
        executor = self._build_executor()
        replaced = {**self.registration_fields, **overrides.fields()}
        loop = asyncio.get_running_loop()
        try:
            versions = await loop.run_in_executor(
                executor,
                lambda: build_path(
                    path, replaced, secrets=self._secrets, executor=executor, codec=self._codec
                ),
            )
        except DefinitionError as exc:  # the client's model is wrong: a bad request
            raise InvalidInput(f"cannot register '{url}': {exc.message}") from exc
        if not versions:
            raise InvalidInput(f"cannot register '{url}': it holds no model")
        names = sorted({mv.name for mv in versions})
        if len(names) > 1:
            await _close(versions)
            raise InvalidInput(
                f"cannot register '{url}': it holds several models ({', '.join(names)}); "
                "register one model per request"
            )
        return versions

    def _add(self, versions: list[ModelVersion], url: str) -> None:
        """Add ``versions`` (one model) to the registry, or raise ``Conflict``; no await here,
        so no other registration can come in between the check and the add."""
        name = versions[0].name
        try:
            existing = {mv.version for mv in self._registry.versions(name)}
        except NotFound:
            existing = set()
        new = {mv.version for mv in versions}
        clash = existing & new
        if clash or (existing and (None in existing or None in new)):
            self._tasks.spawn(_close(versions), "closing unregistered versions")
            if clash and None not in clash:
                which = ", ".join(f"'{v}'" for v in sorted(v for v in clash if v is not None))
                raise Conflict(f"model '{name}' version {which} is already registered")
            raise Conflict(f"model '{name}' is already registered")
        # As TorchServe: new versions of a model already served do not change its default
        # (set-default does); a new model's default is its config's, else its highest version.
        kept = self._registry.default_version(name) if existing else None
        for mv in versions:
            self._registry.add(mv)
            self._registered[(mv.name, mv.version)] = url
            self._started[id(mv)] = _now()
        if kept is not None:
            if kept.version is not None:  # (an unversioned model takes no other version)
                self._registry.set_default(name, kept.version)
            return
        defaults = {mv.config.default_version for mv in versions if mv.config.default_version}
        if len(defaults) == 1:  # build_path checked that they agree
            self._registry.set_default(name, defaults.pop())

    async def _load(self, mv: ModelVersion) -> None:
        try:
            await mv.load()
        finally:
            self._loading.pop(id(mv), None)

    async def unregister(self, name: str, version: str | None = None) -> None:
        """Every version of the model, or the one named: new requests get ``NotFound`` at once;
        requests in flight finish first. ``NotFound`` if unknown."""
        if version:
            versions = [self._registry.get(name, version)]
        else:
            versions = self._registry.versions(name)
        for mv in versions:
            loading = self._loading.pop(id(mv), None)
            if loading is not None:
                loading.cancel()
                await asyncio.gather(loading, return_exceptions=True)
        await self._remove(name, versions, version)

    async def _remove(
        self, name: str, versions: list[ModelVersion], version: str | None = None
    ) -> None:
        if version is None and len(versions) < len(self._registry.versions(name)):
            for mv in versions:  # a subset (a failed registration): one by one
                await self._registry.remove(name, mv.version)
        else:
            await self._registry.remove(name, version)
        for mv in versions:
            self._registered.pop((name, mv.version), None)
            self._scaled.pop((name, mv.version), None)
            self._started.pop(id(mv), None)
            self._given.pop(id(mv), None)
            self._found.pop(id(mv), None)

    # -- scale, set-default ----------------------------------------------------------------

    async def scale(
        self,
        name: str,
        version: str | None,
        min_workers: int,
        max_workers: int,
        *,
        synchronous: bool,
    ) -> Scaled:
        """Run ``min_workers`` workers (at most ``max_workers``) for that version (the default
        one when None): awaited when ``synchronous``, else in the background."""
        mv = self._registry.get(name, version)
        self._scaled[(mv.name, mv.version)] = (min_workers, max_workers)
        if not synchronous:
            self._tasks.spawn(mv.scale(min_workers, max_workers), f"scaling {mv.label}")
            return Scaled(mv.name, mv.version, pending=True)
        await mv.scale(min_workers, max_workers)
        return Scaled(mv.name, mv.version, pending=False)

    def set_default(self, name: str, version: str) -> None:
        """Make ``version`` the model's default; ``NotFound`` if either is unknown."""
        self._registry.set_default(name, version)

    # -- list, describe --------------------------------------------------------------------

    def models(self) -> list[ModelEntry]:
        """Every model, by name, with its default version's URL."""
        registry = self._registry
        return [ModelEntry(n, self._url(registry.default_version(n))) for n in registry.names()]

    def describe(
        self, name: str, version: str | None = None, *, every: bool = False
    ) -> list[VersionDescription]:
        """That version of the model (the default one when None), or every version
        (``every``); ``NotFound`` if unknown."""
        registry = self._registry
        versions = registry.versions(name) if every else [registry.get(name, version)]
        default = registry.default_version(name)
        return [self._describe(mv, mv is default) for mv in versions]

    def _url(self, mv: ModelVersion) -> str:
        """What a version came from, as the operator said it: a registration's url, else its
        source under the path given at start, as given (relative stays relative)."""
        url = self._registered.get((mv.name, mv.version))
        if url is not None:
            return url
        return self._given.get(id(mv)) or Path(mv.source).name

    def _describe(self, mv: ModelVersion, is_default: bool) -> VersionDescription:
        low, high = self._bounds(mv)
        return VersionDescription(
            name=mv.name,
            version=mv.version,
            url=self._url(mv),
            config=mv.config,
            min_workers=low,
            max_workers=high,
            loaded_at_startup=(mv.name, mv.version) not in self._registered,
            default=is_default,
            state=mv.state,
            reason=mv.reason,
            workers=self._workers(mv),
            queue=dict(mv.statistics()),
            trouble=mv.trouble(),
            device=mv.instance.capabilities.device,
        )

    def _workers(self, mv: ModelVersion) -> list[WorkerDescription]:
        infos = mv.workers()
        # device memory by GPU and process, asked of the driver once, only if a worker has a GPU
        usage = inventory().process_memory() if any(i.devices for i in infos) else {}
        return [
            WorkerDescription(
                id=str(info.id),
                pid=info.pid,
                kind=info.kind,
                state=info.state,
                busy=info.busy,
                started=info.started or self._started.get(id(mv), _now()),
                # a thread worker's pid is the server's: the memory it shares
                memory=_memory(info.pid),
                devices=list(info.devices),
                device=info.device,
                device_memory=_device_memory(usage, info.devices, info.pid),
            )
            for info in infos
        ]


def _as_given(source: str, paths: list[Path]) -> str:
    """``source`` (an absolute file) as the first of ``paths`` that holds it names it: that
    path as given, joined with the rest (``models/echo/model.py`` for ``models``); the file's
    name alone if none holds it (a symlink out of the path). Listings show what the operator
    typed, never where the server's files are."""
    file = Path(source)
    for path in paths:
        try:
            rest = file.relative_to(path.resolve())
        except (OSError, ValueError):
            continue
        return str(path / rest) if rest.parts else str(path)
    return file.name


def _device_memory(usage: dict[int, dict[int, int]], gpus: Any, pid: int | None) -> int | None:
    """What process ``pid`` holds on ``gpus``, in bytes; None where the driver does not say."""
    held = [usage[d][pid] for d in gpus if pid in usage.get(d, {})]
    return sum(held) if held else None


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
