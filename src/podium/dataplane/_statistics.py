"""The statistics extension (Triton's): per model version, what ``/metrics`` counts too.

``GET /v2/models[/{m}[/versions/{v}]]/stats`` and gRPC ``ModelStatistics`` answer with these
structs, read from each version's :class:`~podium.runtime.VersionStats` (the counters the
Prometheus metrics read): Triton's fields, in Triton's JSON form (``tritonclient``'s
``get_inference_statistics`` and ``perf_analyzer`` read them).

What Podium counts in each (docs/metrics.md): ``success`` / ``fail`` every request that reached
the model (its whole time in the server's data plane); ``queue`` the wait for a predict slot or
a batch; ``compute_input`` / ``compute_output`` the model's ``preprocess`` / ``postprocess``;
``compute_infer`` its ``predict`` (a batch's time once for each of its requests);
``execution_count`` the executions of ``predict`` (batches), ``inference_count`` the requests
they ran; ``batch_stats`` the executions by batch size (``compute_infer``; Podium runs
``preprocess`` and ``postprocess`` per request, outside the batch, so their per-batch entries
are zero); ``cache_hit`` / ``cache_miss`` the version's response cache (``response_cache``;
zero without one), as Triton counts them: a hit's count and time to look up and copy out the
stored answer, a miss's count and time to look up and to store the answer the model gave. A hit
counts in ``success`` (its whole time in the data plane) and in ``queue``'s count, with no time
(Triton 2.51 counts every request there, hits too); in nothing else: it never reaches a worker
or ``predict``, so ``inference_count``, ``execution_count`` and the compute counts leave it out,
as Triton's do.

``device_stats`` is Podium's, in the JSON answer only (gRPC's message has no field for it), and
only for a version whose workers run on GPUs: per GPU ("cuda:1"), the executions of ``predict``
there, the requests they ran and their time (docs/devices.md, "Seeing it").
"""

from __future__ import annotations

from typing import Any

import msgspec

from ..runtime import UNVERSIONED, CacheStats, Durations, ModelVersion

__all__ = [
    "BatchStatistics",
    "DeviceStatistics",
    "InferStatistics",
    "ModelStatistics",
    "StatisticDuration",
    "StatisticsResponse",
    "model_statistics",
]


class StatisticDuration(msgspec.Struct):
    """How many, and how many nanoseconds in all."""

    count: int = 0
    ns: int = 0


class InferStatistics(msgspec.Struct):
    success: StatisticDuration
    fail: StatisticDuration
    queue: StatisticDuration
    compute_input: StatisticDuration
    compute_infer: StatisticDuration
    compute_output: StatisticDuration
    cache_hit: StatisticDuration
    cache_miss: StatisticDuration


class BatchStatistics(msgspec.Struct):
    batch_size: int
    compute_input: StatisticDuration
    compute_infer: StatisticDuration
    compute_output: StatisticDuration


class MemoryUsage(msgspec.Struct):
    """Triton's memory a model version holds (Podium reports none)."""

    type: str
    id: int
    byte_size: int


class DeviceStatistics(msgspec.Struct):
    """What a version ran on one GPU: ``compute_infer`` counts executions (as ``batch_stats``)."""

    device: str
    execution_count: int
    inference_count: int
    compute_infer: StatisticDuration


class ModelStatistics(msgspec.Struct):
    """One model version's statistics (Triton's ``ModelStatistics``); ``last_inference`` is in
    milliseconds since the epoch (0: none yet)."""

    name: str
    version: str
    last_inference: int
    inference_count: int
    execution_count: int
    inference_stats: InferStatistics
    batch_stats: list[BatchStatistics]
    memory_usage: list[MemoryUsage] = msgspec.field(default_factory=list)
    response_stats: dict[str, Any] = msgspec.field(default_factory=dict)
    #: Podium's: per GPU; left out of the answer for a version on the CPU
    device_stats: list[DeviceStatistics] | msgspec.UnsetType = msgspec.UNSET


class StatisticsResponse(msgspec.Struct):
    """What ``GET /v2/models[/{m}[/versions/{v}]]/stats`` answers."""

    model_stats: list[ModelStatistics]


def _duration(d: Durations) -> StatisticDuration:
    return StatisticDuration(d.count, d.ns)


def model_statistics(mv: ModelVersion) -> ModelStatistics:
    """The statistics of one version, now."""
    stats = mv.stats
    # A model without preprocess (postprocess) spends no time in it: each request executed
    # counts with 0 ns, as every request of Triton's has a compute_input and compute_output.
    executed = stats.infer_count
    pre, post = stats.compute_input, stats.compute_output
    cached = mv.cache.stats if mv.cache is not None else CacheStats()  # none: all zero
    queued = stats.queue_durations()
    infer = InferStatistics(
        success=_duration(stats.success()),
        fail=_duration(stats.fail()),
        queue=StatisticDuration(queued.count + cached.hits, queued.ns),
        compute_input=StatisticDuration(pre.count or executed, pre.ns),
        compute_infer=StatisticDuration(executed, stats.infer_ns),
        compute_output=StatisticDuration(post.count or executed, post.ns),
        cache_hit=StatisticDuration(cached.hits, cached.hit_ns),
        cache_miss=StatisticDuration(cached.misses, cached.miss_ns),
    )
    batches = [
        BatchStatistics(
            batch_size=size,
            compute_input=StatisticDuration(),
            compute_infer=StatisticDuration(count, ns),
            compute_output=StatisticDuration(),
        )
        for size, (count, ns) in sorted(stats.by_size().items())
    ]
    return ModelStatistics(
        name=mv.name,
        version=mv.version or UNVERSIONED,
        last_inference=stats.last_inference_ms(),
        inference_count=stats.infer_count,
        execution_count=stats.execution_count,
        inference_stats=infer,
        batch_stats=batches,
        device_stats=[
            DeviceStatistics(
                device=name,
                execution_count=on.predict.count,
                inference_count=on.inferences,
                compute_infer=_duration(on.predict),
            )
            for name, on in sorted(stats.by_device.items())
        ]
        or msgspec.UNSET,
    )
