"""A version's pool of worker processes (:func:`process_pool`): the ``Init`` each worker process
gets and the :class:`~._parent.ProcessWorker` that spawns and talks to it."""

from __future__ import annotations

import logging
import os
import secrets as _secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING

import msgspec

from ...config import Secrets
from ...logs import current_format
from .._stats import VersionStats
from ..devices import DeviceAssigner, Group
from ..workers import RequestCodec, Worker, WorkerKind, WorkerPool
from ._messages import EnvSecrets, HostFactory, Init
from ._parent import ProcessWorker
from ._remote import RemoteInstance
from ._wire import Ring

if TYPE_CHECKING:
    from ...model import ModelSource

__all__ = ["process_pool"]


def process_pool(
    source: ModelSource,
    *,
    secrets: Mapping[str, str],
    codec: RequestCodec | None,
    host: HostFactory,
    threads: int = 16,
    stats: VersionStats | None = None,
    assigner: DeviceAssigner | None = None,
) -> WorkerPool:
    """A pool of worker processes, each building the model from ``source`` itself: ``host`` is
    called there to build and schedule it (the caller names it; this package imports nothing
    above the execution layer), ``codec`` carries request objects across. ``stats``: the
    version's counters, to which each worker's reports are added; ``assigner``: its devices."""
    config = source.config
    descriptor = RemoteInstance()
    init = Init(
        source=source,
        secrets=EnvSecrets(secrets.directory) if isinstance(secrets, Secrets) else dict(secrets),
        host=host,
        rebuild=None if codec is None else codec.rebuild,
        worker="",
        threads=threads,
        log_level=logging.NOTSET,
    )

    shared = Ring.available()

    async def new_worker(wid: str, group: Group) -> Worker:
        return ProcessWorker(
            wid,
            pool=pool,
            descriptor=descriptor,
            codec=codec,
            devices=group,
            device_env=pool.devices.env(group),
            init=msgspec.structs.replace(
                init,
                worker=wid,
                log_level=logging.getLogger().getEffectiveLevel(),
                log_format=current_format(),
                shm=f"podium-{os.getpid()}-{_secrets.token_hex(4)}-{wid}" if shared else "",
                device=pool.devices.name(group) if group else "",
            ),
        )

    kind = WorkerKind.PROCESS
    pool = WorkerPool.for_config(config, kind, descriptor, new_worker, stats, assigner)
    return pool
