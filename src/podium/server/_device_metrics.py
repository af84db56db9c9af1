"""The devices' part of ``/metrics``: each GPU's state as the driver reports it when Prometheus
scrapes (Triton's ``nv_gpu_*`` names and units, docs/devices.md), each worker's device, and the
device failures each model version met.

GPUs are sampled only when a scrape asks (``nvidia-ml-py``: a few NVML calls per GPU, well
under a millisecond each), never on a request's path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from ..dataplane import UNVERSIONED, GpuSample, ModelVersion

__all__ = ["device_metrics"]

_GPU = ["gpu_uuid", "gpu"]


def device_metrics(
    samples: Callable[[], list[GpuSample]], versions: list[ModelVersion]
) -> Iterator[Metric]:
    """The metric families of the GPUs (``samples()``: their state now) and of ``versions``'
    workers on them."""
    yield from _gpus(samples())
    yield from _workers(versions)


#: Each GPU family: its name, help, the sample's field and what it is divided by (Triton's
#: names and units; a field the driver did not report is not written).
_GPU_FAMILIES = (
    ("nv_gpu_utilization", "GPU utilisation rate, 0.0-1.0 (Triton's).", "utilization", 100),
    ("nv_gpu_memory_total_bytes", "GPU total memory, in bytes (Triton's).", "memory_total", 1),
    ("nv_gpu_memory_used_bytes", "GPU used memory, in bytes (Triton's).", "memory_used", 1),
    ("nv_gpu_power_usage", "GPU power usage, in watts (Triton's).", "power_watts", 1),
    (
        "nv_gpu_power_limit",
        "GPU power management limit, in watts (Triton's).",
        "power_limit_watts",
        1,
    ),
    # a gauge that only grows: a counter would be written nv_energy_consumption_total, not
    # Triton's name
    (
        "nv_energy_consumption",
        "GPU energy consumption since the driver loaded, in joules (Triton's).",
        "energy_joules",
        1,
    ),
    ("podium_gpu_temperature_celsius", "GPU core temperature, in °C.", "temperature_c", 1),
)


def _gpus(samples: list[GpuSample]) -> Iterator[Metric]:
    if not samples:
        return
    for name, doc, field, divisor in _GPU_FAMILIES:
        family = GaugeMetricFamily(name, doc, labels=_GPU)
        for s in samples:
            value = getattr(s, field)
            if value is not None:
                family.add_metric([s.gpu.uuid, str(s.gpu.index)], value / divisor)
        yield family


def _workers(versions: list[ModelVersion]) -> Iterator[Metric]:
    on = GaugeMetricFamily(
        "podium_worker_device",
        "1 for each worker, labelled with its device (cpu, cuda:N in the server's numbering).",
        labels=["model", "version", "worker", "device"],
    )
    oom = CounterMetricFamily(
        "podium_device_out_of_memory",
        "Requests failed because their device ran out of memory (507).",
        labels=["model", "version", "device"],
    )
    lost = CounterMetricFamily(
        "podium_device_lost",
        "Devices lost under a worker (a driver error); the worker was replaced.",
        labels=["model", "version", "device"],
    )
    for mv in versions:
        labels = [mv.name, mv.version or UNVERSIONED]
        for info in mv.workers():
            on.add_metric([*labels, str(info.id), info.device], 1)
        stats = mv.stats
        for device, n in stats.out_of_memory.items():
            oom.add_metric([*labels, device], n)
        for device, n in stats.lost_devices.items():
            lost.add_metric([*labels, device], n)
    yield from (on, oom, lost)
