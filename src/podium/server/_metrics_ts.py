"""TorchServe's frontend metric names on ``/metrics`` (``--ts-metrics prometheus``, or
``metrics_mode=prometheus`` in ``config.properties``), so dashboards and alerts written for
TorchServe keep working.

Each metric of the ``ts_metrics`` section of the server's ``metrics.yaml`` (TorchServe 0.12's
own unless ``--metrics-config`` names another; one the file leaves out is not served, as in
TorchServe) is read, when Prometheus scrapes, from the counters Podium keeps anyway (each
version's ``VersionStats``): nothing more is counted per request. Names, types, help text and
label names are TorchServe's (``Requests2XX{Level="Host",Hostname="..."}``, a counter sample
without ``_total`` as TorchServe's Prometheus client writes it). What each value is, and where
it differs from TorchServe's, is in docs/metrics.md ("TorchServe's names"). The handlers' own
metrics (``HandlerTime``, ``PredictionTime``, what ``context.metrics`` records) are on
``/metrics`` already, whatever the mode (``PodiumCollector``).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.core import Metric

from ..dataplane import UNVERSIONED, DataPlane, ModelVersion
from ..metrics import Kind
from ..model.torchserve import DeclaredMetric, MetricsYaml, log_line, ts_help

__all__ = [
    "LOG_INTERVAL",
    "TorchServeCollector",
    "TorchServeFamily",
    "TorchServeLog",
    "TorchServeValues",
    "ts_values",
]

#: Seconds between two writes of TorchServe's frontend metric lines (``metrics_mode=log``).
LOG_INTERVAL = 10.0
_MB = 1 << 20
_GB = 1 << 30


@dataclass
class TorchServeValues:
    """One reading of what the frontend metrics are made from (all versions together, besides
    the per-version rows)."""

    by_class: dict[str, int]  # "2", "4", "5" -> HTTP answers with such a status
    per_version: list[tuple[str, str, int, int, int]]  # model, version, requests, ns, queue ns
    requests: int  # requests ended, every version and protocol
    request_ns: int
    queue_count: int
    queue_ns: int
    executions: int
    predict_ns: int
    loads: list[tuple[str, str, int]]  # model, version, load ns


def ts_values(versions: list[ModelVersion]) -> TorchServeValues:
    """What the counters say now."""
    found = TorchServeValues({"2": 0, "4": 0, "5": 0}, [], 0, 0, 0, 0, 0, 0, [])
    for mv in versions:
        stats = mv.stats
        version = mv.version or UNVERSIONED
        requests = ns = 0
        for p in stats.protocols:
            for (_, code), n in p.counts().items():
                requests += n
                if code[:1] in found.by_class and code.isdigit():  # HTTP, as TorchServe counts
                    found.by_class[code[:1]] += n
            ns += p.ok.ns + p.failed.ns
        queue = stats.queue_durations()
        found.per_version.append((mv.name, version, requests, ns, queue.ns))
        found.requests += requests
        found.request_ns += ns
        found.queue_count += queue.count
        found.queue_ns += queue.ns
        found.executions += stats.execution_count
        found.predict_ns += stats.predict.ns
        if stats.load_ns:
            found.loads.append((mv.name, version, stats.load_ns))
    return found


def _cpu_times() -> tuple[int, int] | None:
    """(busy, total) jiffies of the whole machine (Linux's /proc/stat), or None."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


def _memory() -> tuple[float, float] | None:
    """(total, available) bytes (Linux's /proc/meminfo), or None."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f}
        return info["MemTotal"], info["MemAvailable"]
    except (OSError, ValueError, KeyError, IndexError):
        return None


class TorchServeFamily(Metric):
    """A family as TorchServe's Prometheus client (simpleclient 0.9) writes it: that client adds
    no ``_total``, so a counter named otherwise is written as it is, untyped (prometheus-client
    would add one), so that the name dashboards query is there; ``add_metric`` as the other
    families have it."""

    def __init__(self, name: str, documentation: str, kind: Kind, labels: list[str]) -> None:
        untyped = kind is Kind.COUNTER and not name.endswith("_total")
        super().__init__(name, documentation, "untyped" if untyped else kind.value)
        self._labelnames = labels

    def add_metric(self, values: list[str], value: float) -> None:
        self.add_sample(self.name, dict(zip(self._labelnames, values, strict=True)), value)


class TorchServeCollector:
    """TorchServe's frontend metrics over one data plane (a prometheus-client collector).

    Gauges that TorchServe sets per request (``QueueTime``, ``WorkerThreadTime``) are the mean
    over the requests answered since the previous scrape (unchanged when none were).
    """

    def __init__(
        self,
        dataplane: DataPlane,
        declared: MetricsYaml,
        *,
        hostname: str | None = None,
        disk: str = os.sep,
        cpu: Callable[[], tuple[int, int] | None] = _cpu_times,
    ) -> None:
        self.dataplane = dataplane
        self.declared = declared
        self.hostname = hostname or socket.gethostname()
        self._disk = disk
        self._cpu = cpu
        self._cpu_last = cpu()
        self._last = TorchServeValues({}, [], 0, 0, 0, 0, 0, 0, [])
        # set once a request was answered (TorchServe's have no sample before)
        self._gauges: dict[str, float] = {}

    def describe(self) -> list[Metric]:
        return []

    def readings(self) -> list[tuple[DeclaredMetric, list[tuple[list[str], float]]]]:
        """Each declared metric and its rows (dimension values, value), read now."""
        now = ts_values(self.dataplane.versions())
        self._update_gauges(now)
        self._last = now
        return [
            (spec, self._rows(spec, now))
            for spec in self.declared.ts_metrics
            if spec.kind is not Kind.HISTOGRAM  # TorchServe's frontend observes none
        ]

    def collect(self) -> Iterator[Metric]:
        for spec, rows in self.readings():
            help_text = ts_help(spec.kind, spec.unit)
            metric = TorchServeFamily(spec.name, help_text, spec.kind, list(spec.dimensions))
            for values, value in rows:
                metric.add_metric(values, value)
            yield metric

    def _update_gauges(self, now: TorchServeValues) -> None:
        last = self._last
        answered = now.requests - last.requests
        queued = now.queue_count - last.queue_count
        if queued > 0:
            self._gauges["QueueTime"] = (now.queue_ns - last.queue_ns) / queued / 1e6
        executions = now.executions - last.executions
        if answered > 0 and executions > 0:
            outside = (now.request_ns - last.request_ns - (now.queue_ns - last.queue_ns)) / answered
            inside = (now.predict_ns - last.predict_ns) / executions
            self._gauges["WorkerThreadTime"] = max(0.0, (outside - inside) / 1e6)

    def _value_of(self, dims: tuple[str, ...], known: dict[str, str]) -> list[str]:
        # TorchServe's dimension names, whatever the file's order: Level, Hostname, ...
        return [known.get(d, known.get(d.lower(), "")) for d in dims]

    def _rows(self, spec: DeclaredMetric, now: TorchServeValues) -> list[tuple[list[str], float]]:
        host = {"Level": "Host", "Hostname": self.hostname, "hostname": self.hostname}
        name = spec.name
        dims = spec.dimensions
        # TorchServe's labelled counters have no sample before their first increment
        if name in ("Requests2XX", "Requests4XX", "Requests5XX"):
            count = now.by_class[name[8]]
            return [(self._value_of(dims, host), float(count))] if count else []
        per = {
            "ts_inference_requests_total": lambda r: float(r[2]),
            "ts_inference_latency_microseconds": lambda r: r[3] / 1e3,
            "ts_queue_latency_microseconds": lambda r: r[4] / 1e3,
        }.get(name)
        if per is not None:
            rows = []
            for row in now.per_version:
                if not row[2]:
                    continue
                known = {**host, "model_name": row[0], "ModelName": row[0], "model_version": row[1]}
                rows.append((self._value_of(dims, known), per(row)))
            return rows
        if name in ("QueueTime", "WorkerThreadTime"):
            found = self._gauges.get(name)
            return [] if found is None else [(self._value_of(dims, host), found)]
        if name == "WorkerLoadTime":
            return [
                (self._value_of(dims, {**host, "WorkerName": f"W-{model}_{version}"}), ns / 1e6)
                for model, version, ns in now.loads
            ]
        system = self._system(name)
        return [] if system is None else [(self._value_of(dims, host), system)]

    def _system(self, name: str) -> float | None:
        """TorchServe's system metrics (its ``system_metrics.py``), from the standard library:
        CPU (since the previous scrape), memory (Linux), the disk Podium runs from; GPU ones
        are not served (None)."""
        if name == "CPUUtilization":
            now, last = self._cpu(), self._cpu_last
            self._cpu_last = now
            if now is None or last is None or now[1] <= last[1]:
                return None
            return round(100.0 * (now[0] - last[0]) / (now[1] - last[1]), 1)
        if name.startswith("Memory"):
            memory = _memory()
            if memory is None:
                return None
            total, available = memory
            return {
                "MemoryUsed": (total - available) / _MB,
                "MemoryAvailable": available / _MB,
                "MemoryUtilization": round(100.0 * (total - available) / total, 1),
            }.get(name)
        if name.startswith("Disk"):
            usage = shutil.disk_usage(self._disk)
            return {
                "DiskUsage": usage.used / _GB,
                "DiskAvailable": usage.free / _GB,
                "DiskUtilization": round(100.0 * usage.used / usage.total, 1),
            }.get(name)
        return None


class TorchServeLog:
    """``--ts-metrics log`` (``metrics_mode=log``): TorchServe's frontend metrics as the lines of
    its ``ts_metrics.log`` (logger ``podium.torchserve.ts_metrics``), written every ``interval``
    seconds and when the server stops, for what changed since the last write: a counter's
    increase (TorchServe writes one line per request, with 1 or that request's latency; summed,
    the lines say the same), a gauge's new value."""

    def __init__(self, collector: TorchServeCollector, interval: float = LOG_INTERVAL) -> None:
        if interval <= 0:
            raise ValueError(f"the metric lines' interval must be positive, got {interval}")
        self.collector = collector
        self.interval = interval
        self._last: dict[tuple[str, tuple[str, ...]], float] = {}

    async def run(self) -> None:
        """Write every ``interval`` seconds until cancelled (the owner flushes once more)."""
        while True:
            await asyncio.sleep(self.interval)
            self.flush()

    def flush(self) -> int:
        """Write the lines of what changed; how many."""
        written = 0
        host = self.collector.hostname
        for spec, rows in self.collector.readings():
            counter = spec.kind is Kind.COUNTER
            for values, value in rows:
                key = (spec.name, tuple(values))
                last = self._last.get(key)
                self._last[key] = value
                logged = value - (last or 0.0) if counter else value
                if (counter and logged <= 0) or (not counter and last == value):
                    continue
                # TorchServe's line leaves its Hostname dimension to the "#hostname:" part
                dims = [(d, v) for d, v in zip(spec.dimensions, values, strict=True)
                        if d.lower() != "hostname"]  # fmt: skip
                log_line(spec.name, spec.unit, logged, dims, model=False, hostname=host)
                written += 1
        return written
