"""The data plane: the one entry every front end calls.

A front end turns its wire format into a :class:`podium.types.Call` (one way: the data plane
never writes to it) and calls :meth:`DataPlane.infer` or :meth:`DataPlane.stream`; the data
plane finds the model version, turns the protocol's payload into what the model's first
parameter asks for, runs it through the version's scheduler, and answers with a
:class:`podium.types.Answer` (or an :class:`podium.types.AnswerStream`): the value in the
protocol's neutral form (an ``InferenceResponse`` for OIP, the model's own value for Truss and
TorchServe, which the front end serialises), the response headers the model set, and where the
call left its stateful sequence. Health and metadata answer with structs
(:class:`podium.types.ServerMetadata`, :class:`podium.types.ModelMetadata`); the models served
and every operation that changes them are the :class:`ModelRepository` it owns
(:attr:`DataPlane.repository`). The mapping is documented cell by cell in ``docs/protocols.md``.

What is served changes only through the management listeners unless the operator says otherwise
(:class:`ControlPolicy`, ``--model-control``): the repository's load and unload take the front end
a call came through and refuse an inference one with ``Forbidden``.

Every call is counted in its version's :class:`VersionStats` (by outcome, code and protocol,
with its duration; the schedulers and workers add queue, preprocess, predict and postprocess
times): the Prometheus metrics and the statistics extension (:meth:`DataPlane.statistics`,
Triton's ``ModelStatistics``) read the same counters.

The system shared memory extension (Triton's) is the :class:`SystemSharedMemory` it owns
(:attr:`DataPlane.shared_memory`): the regions clients register, whichever front end they use,
and the tensors of every OIP call that name a region, read from it and written into it here.
The calls in flight are counted (:class:`InFlight`, :attr:`DataPlane.flight`) so that a
shutdown can turn readiness false, drain them, and cut those that outlive its grace with
``ShuttingDown``, whichever protocol they came through.

Layout: ``_plane`` (inference, health, metadata, statistics), ``_convert`` (payloads in, values
out), ``_repository`` (the repository and its typed descriptions), ``_remote`` (versions whose
model runs elsewhere, for a data plane that forwards their calls: podium.ray), ``_model_config`` (a version's
configuration as Triton's ``ModelConfig``, and a load's ``config``), ``_control`` (who may change
what is served), ``_memory`` (system shared memory), ``_flight`` (the calls in flight, for the
shutdown), ``_statistics`` (the statistics extension's structs). Nothing here imports a front
end.
"""

from ..runtime import (
    DURATION_BUCKETS_NS,
    UNVERSIONED,
    Durations,
    GpuSample,
    ModelVersion,
    VersionStats,
    WorkerState,
    inventory,
)
from ._control import ControlPolicy, ModelControl
from ._flight import FlightReport, InFlight
from ._memory import (
    REGION,
    REGION_PARAMETERS,
    RegionStatus,
    SystemSharedMemory,
    no_cuda,
    no_cuda_region,
)
from ._model_config import ModelConfiguration
from ._plane import DataPlane
from ._repository import (
    ConfigOverrides,
    ModelEntry,
    ModelRepository,
    Registered,
    Scaled,
    VersionDescription,
    WorkerDescription,
)
from ._statistics import ModelStatistics, StatisticsResponse

__all__ = [
    "DURATION_BUCKETS_NS",
    "REGION",
    "REGION_PARAMETERS",
    "UNVERSIONED",
    "ConfigOverrides",
    "ControlPolicy",
    "DataPlane",
    "Durations",
    "FlightReport",
    "GpuSample",
    "InFlight",
    "ModelConfiguration",
    "ModelControl",
    "ModelEntry",
    "ModelRepository",
    "ModelStatistics",
    "ModelVersion",
    "RegionStatus",
    "Registered",
    "Scaled",
    "StatisticsResponse",
    "SystemSharedMemory",
    "VersionDescription",
    "VersionStats",
    "WorkerDescription",
    "WorkerState",
    "inventory",
    "no_cuda",
    "no_cuda_region",
]
