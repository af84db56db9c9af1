"""Registry, scheduling and execution: everything between the data plane and the model
contracts. Imports no web or gRPC library, and nothing of the data plane or the front ends.

Layers, from the top (imports only point down; docs/architecture.md)::

    registry     registry (Registry, ModelVersion: models × versions), loading (sources on
                 disk → workers and a scheduler), _cache (ResponseCache: a version's answers)
    scheduling   direct, batcher, sequences/, continuous; _scheduler (the Scheduler protocol,
                 PoolScheduler), _collector (BatchCollector)
    execution    workers (WorkerPool, thread workers), process/ (process workers), _gate
                 (WorkerGate), _line (Line: the one fair waiting queue), _stats
                 (VersionStats: a version's counters, for metrics and statistics), _clock
                 (the clock and timers; TaskSet, the tasks each part owns)

Other packages import the names below from here (or from a public module: ``registry``,
``loading``, ...), never from a private one.
"""

from ._cache import CacheStats, ResponseCache, answer_size, request_key
from ._scheduler import Scheduler, SequenceScheduling, TaskSet
from ._stats import (
    DURATION_BUCKETS_NS,
    Durations,
    Outcome,
    RestartReason,
    SequenceEnd,
    VersionStats,
    outcome_of,
)
from .devices import GpuSample, inventory
from .loading import (
    ModelSettings,
    build_path,
    check_paths,
    in_declared_environments,
    in_environments,
    register_paths,
)
from .registry import UNVERSIONED, ModelVersion, Registry
from .workers import RequestCodec, WorkerInfo, WorkerKind, WorkerState

__all__ = [
    "DURATION_BUCKETS_NS",
    "UNVERSIONED",
    "CacheStats",
    "Durations",
    "GpuSample",
    "ModelSettings",
    "ModelVersion",
    "Outcome",
    "Registry",
    "RequestCodec",
    "ResponseCache",
    "RestartReason",
    "Scheduler",
    "SequenceEnd",
    "SequenceScheduling",
    "TaskSet",
    "VersionStats",
    "WorkerInfo",
    "WorkerKind",
    "WorkerState",
    "answer_size",
    "build_path",
    "check_paths",
    "in_declared_environments",
    "in_environments",
    "inventory",
    "outcome_of",
    "register_paths",
    "request_key",
]
