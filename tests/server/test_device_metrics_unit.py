"""The GPUs' metric families (server/_metrics.py): Triton's names and units, from what
the driver said; a value the GPU does not report is left out, never written as 0."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from podium.runtime.devices import FakeInventory, GpuSample
from podium.server._metrics import device_metrics


class _Collector:
    def __init__(self, samples: list[GpuSample]) -> None:
        self.samples = samples

    def collect(self):  # type: ignore[no-untyped-def]
        return device_metrics(self.samples)


def _scrape(samples: list[GpuSample]) -> dict[tuple[str, str], float]:
    registry = CollectorRegistry()
    registry.register(_Collector(samples))  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    return {
        (s.name, s.labels.get("gpu", "")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_gpu_families_in_tritons_names_and_units() -> None:
    [gpu] = FakeInventory(1, memory=80 << 30).gpus()
    sample = GpuSample(gpu, 93.0, 10 << 30, 80 << 30, 412.5, 700.0, None, 12_345.0)
    found = _scrape([sample])
    assert found[("nv_gpu_utilization", "0")] == 0.93
    assert found[("nv_gpu_memory_used_bytes", "0")] == float(10 << 30)
    assert found[("nv_gpu_memory_total_bytes", "0")] == float(80 << 30)
    assert found[("nv_gpu_power_usage", "0")] == 412.5
    assert found[("nv_gpu_power_limit", "0")] == 700.0
    assert found[("nv_energy_consumption", "0")] == 12_345.0
    assert ("podium_gpu_temperature_celsius", "0") not in found  # not reported: not written


def test_no_gpu_no_gpu_families() -> None:
    assert not any(name.startswith("nv_") for name, _ in _scrape([]))
