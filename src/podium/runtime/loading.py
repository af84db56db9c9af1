"""Turning model sources on disk into registered, scheduled model versions."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import functools
import logging
import os
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

from .. import tracing
from ..config import FIELDS, ModelConfig
from ..devices import using
from ..errors import DefinitionError, model_label
from ..metrics import recording_to
from ..model import (
    Contract,
    ModelSource,
    ModelSpec,
    NativeModel,
    check_config,
    discover_all,
    import_model,
    mlserver,
    release_all,
    torchserve,
    truss,
)
from ..types import ModelInstance
from . import environments
from ._line import QueuePolicy
from ._scheduler import Scheduler
from ._stats import VersionStats
from .batcher import BatchScheduler
from .continuous import ContinuousScheduler
from .devices import assigner_for, inventory
from .direct import DirectScheduler
from .process import process_pool
from .registry import ModelVersion, Registry
from .sequences import SequenceScheduler
from .workers import RequestCodec, WorkerKind, WorkerPool, thread_pool

logger = logging.getLogger("podium.model")

__all__ = [
    "build_instance",
    "build_path",
    "build_version",
    "check_paths",
    "host_in_worker",
    "prepare",
    "register_paths",
]


def _check_batching(source: ModelSource, spec: ModelSpec) -> None:
    config = source.config
    if (config.continuous_batching and not config.sequence_batching) or spec.predict is None:
        return  # batch_size bounds the continuous batch; check_config reports a missing predict
    if source.config.batch_size > 1 and spec.predict.streaming:
        raise DefinitionError(
            f"{source.label}: predict is a {spec.predict.flavor.value} and batch_size is "
            f"{source.config.batch_size}; dynamic batching needs a predict that returns a list"
        )


def _check_continuous(source: ModelSource) -> None:
    """Continuous batching (with sequence_batching or not) is for native models and
    TorchServe handlers only."""
    contract = source.contract
    if source.config.continuous_batching and contract not in (Contract.NATIVE, Contract.TORCHSERVE):
        raise DefinitionError(
            f"{source.label}: continuous_batching for a {contract.value} model is not "
            "supported yet; only native models (a class with step(self, batch)) and TorchServe "
            "handlers (continuousBatching) have it"
        )


def prepare(source: ModelSource) -> Any:
    """Import and check a model's code, by the contract it is written to (nothing is
    instantiated): a native model's :class:`ModelSpec`, or what the other adapter needs."""
    if source.config.sequence_batching and source.config.workers == WorkerKind.PROCESS:
        raise DefinitionError(
            f"{source.label}: sequence_batching runs on thread workers for now; "
            "set workers: thread (or leave it out)"
        )
    _check_continuous(source)
    if source.contract is Contract.TORCHSERVE:
        return torchserve.prepare(source)
    if source.contract is Contract.MLSERVER:
        return mlserver.prepare(source)
    if source.contract is Contract.TRUSS:
        return truss.prepare(source)
    spec = import_model(source)
    _check_batching(source, spec)
    check_config(spec, source.config, source.label)
    return spec


def build_instance(
    source: ModelSource, prepared: Any, *, secrets: Mapping[str, str], executor: Executor
) -> ModelInstance:
    """One instance of a prepared model (its ``__init__`` / ``initialize`` runs here); with
    tracing on, one whose preprocess, predict and postprocess make spans."""
    instance: ModelInstance
    if source.contract is Contract.TORCHSERVE:
        instance = torchserve.build(source, prepared, secrets=secrets, executor=executor)
    elif source.contract is Contract.MLSERVER:
        instance = mlserver.build(source, prepared, secrets=secrets, executor=executor)
    else:
        try:
            if source.contract is Contract.TRUSS:
                instance = truss.build(source, prepared, secrets=secrets, executor=executor)
            else:
                instance = NativeModel(
                    prepared,
                    source.config,
                    model_dir=source.model_dir,
                    secrets=secrets,
                    executor=executor,
                )
        except DefinitionError as exc:  # __init__ raised: name the file too
            problems = [f"{p} ({source.file})" for p in exc.problems]
            raise DefinitionError.of(problems) from exc
    hooks = tracing.hooks
    if hooks is None:
        return instance
    return hooks.instance(instance, source.config.name, source.config.version)


def build_version(
    source: ModelSource,
    *,
    secrets: Mapping[str, str],
    executor: Executor,
    spec: Any = None,
    codec: RequestCodec | None = None,
    stats: VersionStats | None = None,
) -> ModelVersion:
    """Prepare (unless ``spec`` is given), check and instantiate one model version, with the
    workers and the scheduler its config asks for. Thread workers: the first instance is built
    here (``__init__`` errors surface now); process workers build theirs when the version loads.
    ``codec`` carries request objects into worker processes. ``stats``: the version's counters,
    made by whoever prepared it (the metrics its code created at import are in them)."""
    if stats is None:
        stats = VersionStats()
    if source.contract is Contract.TRUSS:  # what Podium does not do of the truss's config
        for note in truss.notes(source):
            logger.warning("%s", note)
    if spec is None and source.python is None:
        with recording_to(stats.custom):
            spec = prepare(source)
    config = source.config
    # where its workers run: a model asking for GPUs this machine lacks fails here, saying so
    devices = assigner_for(config, model_label(config.name, config.version))
    if source.contract is Contract.TRUSS:  # its GPU type, checked (a warning, not an error)
        used = {index for group in devices.groups for index in group}
        given = [(g.index, g.name) for g in inventory().gpus() if g.index in used]
        mismatch = truss.accelerator_note(source, given)
        if mismatch:
            logger.warning("%s", mismatch)
    pool: WorkerPool
    if WorkerKind(config.workers) is WorkerKind.PROCESS:
        threads = getattr(executor, "_max_workers", 16)
        pool = process_pool(
            source,
            secrets=secrets,
            codec=codec,
            host=host_in_worker,
            threads=threads,
            stats=stats,
            assigner=devices,
        )
    else:
        with recording_to(stats.custom), using(devices.name(devices.groups[0])):
            instance = build_instance(source, spec, secrets=secrets, executor=executor)
        build = functools.partial(build_instance, source, spec, secrets=secrets, executor=executor)
        pool = thread_pool(
            source, instance, build=build, executor=executor, stats=stats, assigner=devices
        )
    scheduler: Scheduler
    if config.continuous_batching and not config.sequence_batching:
        scheduler = ContinuousScheduler(pool, config=config)
    elif config.sequence_batching:  # with continuous_batching: a sequence's requests overlap
        scheduler = SequenceScheduler(pool, config=config)
    elif config.batch_size > 1:
        scheduler = BatchScheduler(
            pool,
            model=config.name,
            batch_size=config.batch_size,
            max_batch_delay_ms=config.max_batch_delay_ms,
            max_queue_size=config.max_queue_size,
            concurrency=config.predict_concurrency,
            max_queue_delay_ms=config.max_queue_delay_ms,
            priority=QueuePolicy.of(config),
        )
    else:
        scheduler = DirectScheduler(
            pool,
            model=config.name,
            concurrency=config.predict_concurrency,
            max_queue_size=config.max_queue_size,
            stream_buffer=config.stream_buffer,
            policy=QueuePolicy.of(config),
        )
    return ModelVersion(
        config,
        pool.instance,
        scheduler,
        source=str(source.file),
        pool=pool,
        owned=list(source.owned),
    )


def _discover(
    paths: list[Path], names: Mapping[Path, str] | None = None
) -> tuple[list[ModelSource], list[str]]:
    """Every model under ``paths``; ``names``: the name a path's model is served under (a
    TorchServe ``--models name=file.mar``), in place of its own."""
    sources: list[ModelSource] = []
    problems: list[str] = []
    for path in paths:
        found, path_problems = discover_all(path)  # a bad config hides no other model's problems
        name = (names or {}).get(path)
        if name is not None:
            found = [_with_config(s, {"name": name}) for s in found]
        sources.extend(found)
        problems.extend(path_problems)
    return sources, problems


@dataclasses.dataclass(frozen=True, slots=True)
class ModelSettings:
    """Model settings given from outside the models' own files (TorchServe's
    ``config.properties``, MLServer's ``settings.json``): ``names`` (a path's model served under
    another name), ``models`` (a model's keys by its name, over its own), ``defaults`` (keys for
    every model whose own config does not set them), ``sources`` (models defined by no file of
    their own: MLServer's model from ``MLSERVER_MODEL_*`` variables)."""

    names: Mapping[Path, str] = dataclasses.field(default_factory=dict)
    models: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    sources: tuple[ModelSource, ...] = ()

    def apply(self, source: ModelSource, problems: list[str]) -> ModelSource:
        raw = source.config.raw
        values = {
            key: value
            for key, value in self.defaults.items()
            if key not in raw and (FIELDS[key].torchserve or key) not in raw
        }
        values.update(self.models.get(source.config.name, {}))
        if not values:
            return source
        data = {k: v for k, v in raw.items() if k in FIELDS}  # its own keys, checked again
        values = _raised(values, source.config)
        data.update(values)
        try:
            checked = ModelConfig.from_mapping(
                {**data, "name": source.config.name},
                default_name=source.config.name,
                where=f"{source.label} with config.properties' settings",
            )
        except DefinitionError as exc:
            problems.extend(exc.problems)
            return source
        return _with_config(
            source, {FIELDS[k].attr: getattr(checked, FIELDS[k].attr) for k in values}
        )


def _with_config(source: ModelSource, values: Mapping[str, Any]) -> ModelSource:
    """``source`` with ``values`` (``ModelConfig`` fields) in place of its config's own."""
    return dataclasses.replace(source, config=dataclasses.replace(source.config, **values))


def _raised(values: Mapping[str, Any], config: ModelConfig) -> dict[str, Any]:
    """``values`` with ``max_workers`` raised to a ``min_workers`` above it, where they set
    ``min_workers`` alone (as registration does)."""
    low = values.get("min_workers")
    if low is None or "max_workers" in values:
        return dict(values)
    return {**values, "max_workers": max(config.max_workers, low, 1)}


#: A model version imported and checked: its source, what ``prepare`` made of it, and the
#: counters of the version it becomes (the metrics its code created at import are there).
Checked = tuple[ModelSource, Any, VersionStats]


def _check(sources: list[ModelSource], problems: list[str]) -> tuple[list[Checked], list[str]]:
    """Import every model once; the checked ones, and every problem found (added to ``problems``)."""
    seen: dict[tuple[str, str | None], ModelSource] = {}
    checked: list[Checked] = []
    for source in sources:
        key = (source.config.name, source.config.version)
        if key in seen:
            problems.append(f"{source.label}: defined twice (also in {seen[key].file})")
        seen[key] = source
        stats = VersionStats()
        if source.python is not None:  # its code imports in its own environment, not here
            checked.append((source, None, stats))
            continue
        try:
            with recording_to(stats.custom):
                spec = prepare(source)
        except DefinitionError as exc:
            problems.extend(exc.problems)
            continue
        checked.append((source, spec, stats))
    problems.extend(_defaults(sources)[1])
    return checked, problems


def _build(
    checked: list[Checked],
    *,
    secrets: Mapping[str, str],
    executor: Executor,
    codec: RequestCodec | None,
) -> list[ModelVersion]:
    """Every checked model instantiated, or one ``DefinitionError`` listing every failure."""
    problems: list[str] = []
    versions: list[ModelVersion] = []
    for source, spec, stats in checked:
        try:
            versions.append(
                build_version(
                    source,
                    secrets=secrets,
                    executor=executor,
                    spec=spec,
                    codec=codec,
                    stats=stats,
                )
            )
        except DefinitionError as exc:
            problems.extend(exc.problems)
    DefinitionError.check(problems)
    return versions


def _defaults(sources: list[ModelSource]) -> tuple[dict[str, str], list[str]]:
    """The configured default version of each model, and the problems with them."""
    defaults: dict[str, str] = {}
    problems: list[str] = []
    for source in sources:
        wanted = source.config.default_version
        if wanted is None:
            continue
        if defaults.setdefault(source.config.name, wanted) != wanted:
            problems.append(
                f"{source.label}: default_version is set to both "
                f"'{defaults[source.config.name]}' and '{wanted}'"
            )
    for name, wanted in defaults.items():
        known = [str(s.config.version) for s in sources if s.config.name == name]
        if wanted not in known:
            problems.append(
                f"model '{name}': default_version '{wanted}' is not one of its versions "
                f"({', '.join(sorted(known))})"
            )
    return defaults, problems


def in_environments(sources: list[ModelSource], problems: list[str]) -> list[ModelSource]:
    """Each source that declares requirements, with them installed into its own environment
    (``runtime.environments``; cached) and set to run in worker processes started from it; a
    failed install is a problem of that model (added to ``problems``, the source left out)."""

    def make(source: ModelSource) -> tuple[environments.Environment, str] | None:
        wanted = source.requirements()
        return (environments.install(wanted, label=source.label), "") if wanted else None

    return _in_environment(sources, problems, make)


def in_declared_environments(sources: list[ModelSource], problems: list[str]) -> list[ModelSource]:
    """Each source that brings its own environment (an MLServer ``environment_tarball``,
    unpacked and cached, or ``environment_path``: ``runtime.environments``) set to run in
    worker processes started from it, its programs first on ``PATH``; one whose environment
    cannot be made is a problem of that model (added to ``problems``, the source left out)."""

    def make(source: ModelSource) -> tuple[environments.Environment, str] | None:
        declared = mlserver.declared_environment(source)
        if declared is None:
            return None
        kind, path = declared
        use = environments.use_existing if kind == "path" else environments.unpack
        return use(path, label=source.label), f" ({path})"

    return _in_environment(sources, problems, make)


def _in_environment(
    sources: list[ModelSource],
    problems: list[str],
    make: Callable[[ModelSource], tuple[environments.Environment, str] | None],
) -> list[ModelSource]:
    """Each source set to run in worker processes from the environment ``make`` gives it (and
    where from, for the log; None: it needs none, and stays as it is)."""
    placed: list[ModelSource] = []
    for source in sources:
        try:
            made = make(source)
        except DefinitionError as exc:
            problems.extend(exc.problems)
            continue
        if made is None:
            placed.append(source)
            continue
        env, where = made
        logger.info("%s runs in worker processes from %s%s", source.label, env.path, where)
        source = _with_config(source, {"workers": WorkerKind.PROCESS.value})
        process_env = dict(source.process_env)
        if env.bin is not None:
            process_env["PATH"] = os.pathsep.join(
                p for p in (str(env.bin), os.environ.get("PATH", "")) if p
            )
        placed.append(dataclasses.replace(source, python=env.python, process_env=process_env))
    return placed


def check_paths(paths: list[Path]) -> list[str]:
    """Every definition problem in ``paths``, without instantiating or serving anything: each
    model is imported once, but one that brings its own environment (an environment tarball),
    whose packages are absent here, has its environment made (unpacked, cached) instead."""
    sources, problems = _discover(paths)
    return _check(in_declared_environments(sources, problems), problems)[1]


def register_paths(
    registry: Registry,
    paths: list[Path],
    *,
    secrets: Mapping[str, str],
    executor: Executor,
    codec: RequestCodec | None = None,
    only: tuple[str, str | None] | None = None,
    overrides: Mapping[str, Any] | None = None,
    install_requirements: bool = False,
    settings: ModelSettings | None = None,
) -> None:
    """Discover and instantiate every model under ``paths`` into ``registry``.

    Each model file is imported once. Raises one ``DefinitionError`` listing every model that
    cannot be loaded (import errors, contract violations, ``__init__`` failures), and then
    registers none of them; ``load()`` runs later, per model.

    ``only``: the one version (name, version) to take of those found; the others are not
    imported (``DefinitionError`` if it is not there). ``overrides``: ``ModelConfig`` fields in
    place of each config's own (``dataclasses.replace``; the caller validated them).
    ``install_requirements``: a model that declares requirements runs from an environment of
    its own with them installed (:func:`in_environments`). ``settings``: model settings from
    outside the models' own files (:class:`ModelSettings`).
    """
    sources, problems = _discover(paths, settings.names if settings else None)
    if settings is not None:
        sources = [settings.apply(source, problems) for source in [*sources, *settings.sources]]
    if only is not None:
        sources = [s for s in sources if (s.config.name, s.config.version) == only]
        if not sources and not problems:
            name, version = only
            problems.append(
                f"{model_label(name, version)} is not under {', '.join(str(p) for p in paths)}"
            )
    sources = in_declared_environments(sources, problems)
    if install_requirements:
        sources = in_environments(sources, problems)
    if overrides:
        sources = [_with_config(s, overrides) for s in sources]
    checked, problems = _check(sources, problems)
    DefinitionError.check(problems)
    versions = _build(checked, secrets=secrets, executor=executor, codec=codec)
    for mv in versions:
        registry.add(mv)
    for name, wanted in _defaults([source for source, _, _ in checked])[0].items():
        registry.set_default(name, wanted)


def build_path(
    path: Path,
    overrides: Mapping[str, Any],
    *,
    secrets: Mapping[str, str],
    executor: Executor,
    codec: RequestCodec | None = None,
) -> list[ModelVersion]:
    """Discover, check and instantiate every model version at ``path`` (a model file, model
    directory or archive) for registration at run time, each config with ``overrides`` in place
    of its own values (``dataclasses.replace``; the caller validated them; a ``min_workers``
    above the config's ``max_workers`` raises that too). Nothing is registered: the caller adds
    the versions to the registry on the event loop. One ``DefinitionError`` lists every problem;
    then what discovery made on disk for them (an archive's extraction) is released.
    """
    found, problems = _discover([path])
    try:
        sources = [_with_config(s, _raised(overrides, s.config)) for s in found]
        sources = in_declared_environments(sources, problems)
        checked, problems = _check(sources, problems)
        DefinitionError.check(problems)
        return _build(checked, secrets=secrets, executor=executor, codec=codec)
    except BaseException:  # no version came of them: what they own goes (an extraction)
        release_all(owned for source in found for owned in source.owned)
        raise


async def host_in_worker(
    source: ModelSource, secrets: Mapping[str, str], executor: Executor
) -> tuple[ModelInstance, DirectScheduler]:
    """The model of a process worker, built and loaded in its worker process, and the scheduler
    that runs each request through it there (the ``HostFactory`` handed to ``process_pool``:
    the worker process imports this module by reference, ``runtime.process`` never names it).
    The metrics its code creates record to the store the worker process set
    (:func:`podium.metrics.recording_to`), which it reports to the server."""
    loop = asyncio.get_running_loop()
    run = contextvars.copy_context().run  # the worker's metric store, in the pool's threads too
    prepared = await loop.run_in_executor(executor, run, prepare, source)
    build = functools.partial(build_instance, source, prepared, secrets=secrets, executor=executor)
    instance = await loop.run_in_executor(executor, run, build)
    await instance.load()
    config = source.config
    scheduler = DirectScheduler(
        instance,
        model=config.name,
        concurrency=config.predict_concurrency,
        max_queue_size=1 << 30,  # the server's line bounds what reaches a worker
        stream_buffer=1,  # the window to the server is the stream's real buffer
    )
    return instance, scheduler
