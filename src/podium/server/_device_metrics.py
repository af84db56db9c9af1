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


def _gpus(samples: list[GpuSample]) -> Iterator[Metric]:
    if not samples:
        return
    utilization = GaugeMetricFamily(
        "nv_gpu_utilization", "GPU utilisation rate, 0.0-1.0 (Triton's).", labels=_GPU
    )
    total = GaugeMetricFamily(
        "nv_gpu_memory_total_bytes", "GPU total memory, in bytes (Triton's).", labels=_GPU
    )
    used = GaugeMetricFamily(
        "nv_gpu_memory_used_bytes", "GPU used memory, in bytes (Triton's).", labels=_GPU
    )
    power = GaugeMetricFamily(
        "nv_gpu_power_usage", "GPU power usage, in watts (Triton's).", labels=_GPU
    )
    limit = GaugeMetricFamily(
        "nv_gpu_power_limit", "GPU power management limit, in watts (Triton's).", labels=_GPU
    )
    # a gauge that only grows: a counter would be written nv_energy_consumption_total, not
    # Triton's name
    energy = GaugeMetricFamily(
        "nv_energy_consumption",
        "GPU energy consumption since the driver loaded, in joules (Triton's).",
        labels=_GPU,
    )
    temperature = GaugeMetricFamily(
        "podium_gpu_temperature_celsius", "GPU core temperature, in °C.", labels=_GPU
    )
    for s in samples:
        labels = [s.gpu.uuid, str(s.gpu.index)]
        total.add_metric(labels, s.memory_total)
        if s.utilization is not None:
            utilization.add_metric(labels, s.utilization / 100)
        if s.memory_used is not None:
            used.add_metric(labels, s.memory_used)
        if s.power_watts is not None:
            power.add_metric(labels, s.power_watts)
        if s.power_limit_watts is not None:
            limit.add_metric(labels, s.power_limit_watts)
        if s.energy_joules is not None:
            energy.add_metric(labels, s.energy_joules)
        if s.temperature_c is not None:
            temperature.add_metric(labels, s.temperature_c)
    yield from (utilization, total, used, power, limit, energy, temperature)


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
