"""TorchServe's ``metrics.yaml`` (``metrics_config``): the metrics it declares.

Two sections matter: ``model_metrics`` (what a handler finds in ``context.metrics`` before it
adds anything: ``get_metric("RequestBatchSize", MetricTypes.GAUGE)`` works as in TorchServe,
whose backend fills its cache from this section) and ``ts_metrics`` (the frontend's own names,
``ts_inference_requests_total``, ``Requests2XX``, ``QueueTime``..., that Podium serves beside its
own when ``metrics_mode`` asks). Each is ``{counter|gauge|histogram: [{name, unit,
dimensions}]}``. Without a file, TorchServe 0.12's own ``ts/configs/metrics.yaml`` applies
(:data:`TORCHSERVE_DEFAULT`). A file that TorchServe would refuse is refused here, naming the
file and the entry; TorchServe's frontend logs it and goes on without metrics.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...config import load_yaml
from ...errors import DefinitionError
from ...metrics import Kind

__all__ = ["TORCHSERVE_DEFAULT", "DeclaredMetric", "MetricsYaml", "read_metrics_yaml"]


@dataclass(frozen=True, slots=True)
class DeclaredMetric:
    """One entry of a ``metrics.yaml`` section."""

    name: str
    kind: Kind
    unit: str
    dimensions: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class MetricsYaml:
    """A ``metrics.yaml``: the frontend's metrics (``ts_metrics``) and the handlers'
    (``model_metrics``), each in the file's order."""

    ts_metrics: tuple[DeclaredMetric, ...]
    model_metrics: tuple[DeclaredMetric, ...]
    source: str = "TorchServe 0.12's ts/configs/metrics.yaml"


_HOST = ("Level", "Hostname")
_LATENCY = ("model_name", "model_version", "hostname")
_C, _G = Kind.COUNTER, Kind.GAUGE


_m = DeclaredMetric  # (name, kind, unit, dimensions), short for the table below


#: TorchServe 0.12's default ``metrics.yaml`` (``ts/configs/metrics.yaml``), as data.
TORCHSERVE_DEFAULT = MetricsYaml(
    ts_metrics=(
        _m("Requests2XX", _C, "Count", _HOST),
        _m("Requests4XX", _C, "Count", _HOST),
        _m("Requests5XX", _C, "Count", _HOST),
        _m("ts_inference_requests_total", _C, "Count", _LATENCY),
        _m("ts_inference_latency_microseconds", _C, "Microseconds", _LATENCY),
        _m("ts_queue_latency_microseconds", _C, "Microseconds", _LATENCY),
        _m("QueueTime", _G, "Milliseconds", _HOST),
        _m("WorkerThreadTime", _G, "Milliseconds", _HOST),
        _m("WorkerLoadTime", _G, "Milliseconds", ("WorkerName", *_HOST)),
        _m("CPUUtilization", _G, "Percent", _HOST),
        _m("MemoryUsed", _G, "Megabytes", _HOST),
        _m("MemoryAvailable", _G, "Megabytes", _HOST),
        _m("MemoryUtilization", _G, "Percent", _HOST),
        _m("DiskUsage", _G, "Gigabytes", _HOST),
        _m("DiskUtilization", _G, "Percent", _HOST),
        _m("DiskAvailable", _G, "Gigabytes", _HOST),
        _m("GPUMemoryUtilization", _G, "Percent", ("Level", "DeviceId", "Hostname")),
        _m("GPUMemoryUsed", _G, "Megabytes", ("Level", "DeviceId", "Hostname")),
        _m("GPUUtilization", _G, "Percent", ("Level", "DeviceId", "Hostname")),
    ),
    model_metrics=(
        _m("HandlerTime", _G, "ms", ("ModelName", "Level")),
        _m("PredictionTime", _G, "ms", ("ModelName", "Level")),
    ),
)


def _section(where: str, parsed: Mapping[str, Any], key: str) -> tuple[DeclaredMetric, ...]:
    section = parsed.get(key)
    if section is None:
        return ()
    if not isinstance(section, Mapping):
        raise DefinitionError(f"{where}: '{key}' must map counter/gauge/histogram to lists")
    found: list[DeclaredMetric] = []
    for type_name, entries in section.items():
        try:
            kind = Kind(str(type_name))
        except ValueError:
            raise DefinitionError(
                f"{where}: '{key}.{type_name}' is not a metric type (counter, gauge, histogram)"
            ) from None
        for i, entry in enumerate(entries or ()):
            at = f"{where}: '{key}.{type_name}[{i}]'"
            if not isinstance(entry, Mapping):
                raise DefinitionError(f"{at} must be a mapping with name, unit and dimensions")
            missing = [k for k in ("name", "unit", "dimensions") if k not in entry]
            if missing:  # TorchServe's backend refuses such an entry (MetricsCacheKeyError)
                raise DefinitionError(f"{at} has no {', '.join(missing)}")
            name, unit, dims = entry["name"], entry["unit"], entry["dimensions"] or []
            if not isinstance(name, str) or not name:
                raise DefinitionError(f"{at}: 'name' must be a non-empty string")
            if not isinstance(dims, list) or not all(isinstance(d, str) for d in dims):
                raise DefinitionError(f"{at} ('{name}'): 'dimensions' must be a list of names")
            found.append(DeclaredMetric(name, kind, str(unit), tuple(dims)))
    return tuple(found)


def read_metrics_yaml(path: Path | None) -> MetricsYaml:
    """``path`` read as TorchServe reads it (None: TorchServe's default); ``DefinitionError``
    naming the file and the entry that is wrong."""
    if path is None:
        return TORCHSERVE_DEFAULT
    where = str(path)
    try:
        parsed = load_yaml(path)
    except DefinitionError as exc:
        raise DefinitionError(f"metrics_config {exc}") from None
    return MetricsYaml(
        _section(where, parsed, "ts_metrics"),
        _section(where, parsed, "model_metrics"),
        source=where,
    )
