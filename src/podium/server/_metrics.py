"""The metrics listener: ``GET /metrics`` in Prometheus's exposition formats.

:class:`PodiumCollector` turns what the data plane counts (each model version's
``VersionStats``, its scheduler's and workers' state, the model's own metrics) and the
listeners' connection counters into metric families when Prometheus scrapes; prometheus-client
writes the exposition (text, or OpenMetrics when asked for). Nothing is computed per request
here: requests pay only for the counters' increments (``runtime/_stats``), and label sets are
made at scrape time from the versions registered then. A scrape runs on the event loop, where
every counter is written, so it reads a consistent state without a lock.

The GPUs' families (Triton's ``nv_gpu_*`` names and units, docs/devices.md) are sampled only when
a scrape asks (``nvidia-ml-py``: a few NVML calls per GPU, well under a millisecond each), never
on a request's path; each worker's device and the device failures of each version are counted
with the rest.

Every metric, with its labels and the nearest TorchServe, MLServer and Triton names, is in
docs/metrics.md.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.utils import floatToGoString

from .. import __version__
from ..dataplane import (
    DURATION_BUCKETS_NS,
    UNVERSIONED,
    DataPlane,
    Durations,
    GpuSample,
    ModelVersion,
    WorkerState,
    inventory,
)
from ..errors import MethodNotAllowed, NotFound, PodiumError
from ..metrics import Kind
from ..types import ModelState
from ._access import AccessLog
from ._asgi import Receive, Scope, Send, header
from ._limits import ConnectionStatistics
from ._metrics_ts import TorchServeFamily
from .http._responses import send_body, send_error

__all__ = ["MetricsApp", "PodiumCollector", "device_metrics", "metrics_registry"]

logger = logging.getLogger("podium.metrics")

_BOUNDS = [floatToGoString(ns / 1e9) for ns in DURATION_BUCKETS_NS] + ["+Inf"]
#: Upper bounds of the batch size histogram.
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
_MV = ["model", "version"]


def _histogram(family: HistogramMetricFamily, labels: list[str], d: Durations) -> None:
    family.add_metric(labels, list(zip(_BOUNDS, d.cumulative(), strict=True)), d.ns / 1e9)


def _cumulative(bounds: list[str], counts: Iterable[float]) -> list[tuple[str, float]]:
    """A histogram's buckets as Prometheus has them: each bound with the count up to it."""
    return list(zip(bounds, itertools.accumulate(counts), strict=True))


def _counter(name: str, doc: str, *labels: str) -> CounterMetricFamily:
    """A counter family of model versions: labelled ``model``, ``version``, then ``labels``."""
    return CounterMetricFamily(name, doc, labels=[*_MV, *labels])


def _gauge(name: str, doc: str, *labels: str) -> GaugeMetricFamily:
    """A gauge family of model versions (as :func:`_counter`)."""
    return GaugeMetricFamily(name, doc, labels=[*_MV, *labels])


def _histogram_family(name: str, doc: str, *labels: str) -> HistogramMetricFamily:
    """A histogram family of model versions (as :func:`_counter`)."""
    return HistogramMetricFamily(name, doc, labels=[*_MV, *labels])


def _labels(mv: ModelVersion) -> list[str]:
    return [mv.name, mv.version or UNVERSIONED]


_GPU = ["gpu_uuid", "gpu"]

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


def device_metrics(samples: list[GpuSample]) -> Iterator[Metric]:
    """The GPUs' families, from ``samples`` (their state now; none: no family)."""
    if not samples:
        return
    for name, doc, field, divisor in _GPU_FAMILIES:
        family = GaugeMetricFamily(name, doc, labels=_GPU)
        for s in samples:
            value = getattr(s, field)
            if value is not None:
                family.add_metric([s.gpu.uuid, str(s.gpu.index)], value / divisor)
        yield family


class PodiumCollector:
    """Podium's metrics, read when Prometheus scrapes (a prometheus-client collector).

    ``connections()`` gives each HTTP listener's connection counters by name;
    ``grpc_connections()`` each gRPC listener's open connections (None where grpc does not
    say); ``gpus()`` the GPUs' state now (default: the server's device inventory's).
    """

    def __init__(
        self,
        dataplane: DataPlane,
        *,
        connections: Callable[[], Mapping[str, ConnectionStatistics]] = dict,
        grpc_connections: Callable[[], Mapping[str, int | None]] = dict,
        gpus: Callable[[], list[GpuSample]] | None = None,
        access_log: AccessLog | None = None,
    ) -> None:
        self.dataplane = dataplane
        self._access_log = access_log
        self._gpus = gpus if gpus is not None else self._sample_gpus
        self._connections = connections
        self._grpc_connections = grpc_connections
        self._clashes: set[str] = set()

    @staticmethod
    def _sample_gpus() -> list[GpuSample]:
        try:
            return inventory().sample()
        except Exception as exc:  # a scrape answers without the GPUs rather than failing
            logger.warning("metrics: the GPUs could not be read: %s", exc)
            return []

    def describe(self) -> list[Metric]:
        return []  # names are not claimed ahead: each scrape says what there is

    def collect(self) -> Iterator[Metric]:
        yield InfoMetricFamily("podium_build", "Podium's version.", value={"version": __version__})
        yield from self._server()
        versions = self.dataplane.versions()
        yield from self._requests(versions)
        yield from self._tokens(versions)
        yield from self._state(versions)
        yield from self._cache(versions)
        yield from device_metrics(self._gpus())
        yield from self._custom(versions)

    # -- server-wide -----------------------------------------------------------------------------

    def _server(self) -> Iterator[Metric]:
        http = self._connections()
        open_ = GaugeMetricFamily(
            "podium_http_connections_open",
            "HTTP connections open, by listener.",
            labels=["listener"],
        )
        accepted = CounterMetricFamily(
            "podium_http_connections", "HTTP connections served, by listener.", labels=["listener"]
        )
        refused = CounterMetricFamily(
            "podium_http_connections_refused",
            "HTTP connections refused because --max-connections were open.",
            labels=["listener"],
        )
        closed = CounterMetricFamily(
            "podium_http_connections_closed",
            "HTTP connections or requests cut by a limit, by listener and limit (header_timeout, "
            "idle_timeout, slow_body, oversized_head, bad_request).",
            labels=["listener", "limit"],
        )
        for name, s in http.items():
            open_.add_metric([name], s.open)
            accepted.add_metric([name], s.accepted)
            refused.add_metric([name], s.refused)
            for limit, value in (
                ("header_timeout", s.header_timeouts),
                ("idle_timeout", s.idle_timeouts),
                ("slow_body", s.slow_bodies),
                ("oversized_head", s.oversized_heads),
                ("bad_request", s.bad_requests),
            ):
                closed.add_metric([name, limit], value)
        yield from (open_, accepted, refused, closed)
        grpc_open = GaugeMetricFamily(
            "podium_grpc_connections_open",
            "gRPC connections open, by listener.",
            labels=["listener"],
        )
        for name, count in self._grpc_connections().items():
            if count is not None:
                grpc_open.add_metric([name], count)
        yield grpc_open
        log = self._access_log
        if log is not None:
            dropped = CounterMetricFamily(
                "podium_access_log_dropped_lines",
                "Access lines dropped because the access log's queue was full (the log could "
                "not keep up); requests never wait for it.",
            )
            dropped.add_metric([], log.dropped)
            queued = GaugeMetricFamily(
                "podium_access_log_queued_lines", "Access lines waiting to be written."
            )
            queued.add_metric([], log.queued)
            yield from (dropped, queued)

    # -- requests --------------------------------------------------------------------------------

    def _requests(self, versions: list[ModelVersion]) -> Iterator[Metric]:
        total = _counter(
            "podium_requests",
            "Inference requests by how they ended (outcome) and the status or gRPC code sent.",
            "protocol",
            "outcome",
            "code",
        )
        duration = _histogram_family(
            "podium_request_duration_seconds",
            "Time from a request reaching the model's data plane to its answer (a stream: to "
            "its last item), every outcome.",
            "protocol",
        )
        parts = {
            "queue": _histogram_family(
                "podium_queue_duration_seconds",
                "Time a request waited for a predict slot or for its batch to start.",
            ),
            "preprocess": _histogram_family(
                "podium_preprocess_duration_seconds", "Time in the model's preprocess."
            ),
            "predict": _histogram_family(
                "podium_predict_duration_seconds",
                "Time in the model's predict (handle, step), per execution (a batch is one).",
            ),
            "postprocess": _histogram_family(
                "podium_postprocess_duration_seconds", "Time in the model's postprocess."
            ),
        }
        first = _histogram_family(
            "podium_stream_first_item_seconds",
            "Time from a streaming request's arrival to its first item.",
        )
        items = _counter("podium_stream_items", "Items streamed.")
        batch_size = _histogram_family(
            "podium_batch_size",
            "Requests per execution of predict (1 without batching; a continuous batch's step).",
        )
        batches = _counter(
            "podium_batches", "Executions of predict (each a batch, of 1 without batching)."
        )
        steps = _counter("podium_continuous_steps", "Steps of continuous batching.")
        ended = _counter(
            "podium_sequences_ended",
            "Stateful sequences ended, by reason (request, model, idle, timeout, worker_lost).",
            "reason",
        )
        restarts = _counter(
            "podium_worker_restarts",
            "Workers replaced, by reason (crashed, response_timeout, device_lost).",
            "reason",
        )
        oom = _counter(
            "podium_device_out_of_memory",
            "Requests failed because their device ran out of memory (507).",
            "device",
        )
        lost = _counter(
            "podium_device_lost",
            "Devices lost under a worker (a driver error); the worker was replaced.",
            "device",
        )
        for mv in versions:
            labels = _labels(mv)
            stats = mv.stats
            for p in stats.protocols:
                if not (p.ok.count or p.failed.count or p.codes):
                    continue
                with_protocol = [*labels, p.protocol.value]
                for (outcome, code), n in sorted(p.counts().items(), key=lambda kv: kv[0][1]):
                    total.add_metric([*with_protocol, outcome.value, code], n)
                _histogram(duration, with_protocol, Durations.total((p.ok, p.failed)))
            _histogram(parts["queue"], labels, stats.queue_durations())
            _histogram(parts["preprocess"], labels, stats.compute_input)
            _histogram(parts["predict"], labels, stats.predict)
            _histogram(parts["postprocess"], labels, stats.compute_output)
            if stats.first_item.count:
                _histogram(first, labels, stats.first_item)
            items.add_metric(labels, stats.items)
            self._batches(batch_size, labels, stats.by_size())
            batches.add_metric(labels, stats.execution_count)
            if stats.steps:
                steps.add_metric(labels, stats.steps)
            for reason, n in stats.sequences_ended.items():
                ended.add_metric([*labels, reason.value], n)
            for why, n in stats.restarts.items():
                restarts.add_metric([*labels, why.value], n)
            for device, n in stats.out_of_memory.items():
                oom.add_metric([*labels, device], n)
            for device, n in stats.lost_devices.items():
                lost.add_metric([*labels, device], n)
        yield from (total, duration, *parts.values(), first, items, batch_size, batches)
        yield from (steps, ended, restarts, oom, lost)

    def _tokens(self, versions: list[ModelVersion]) -> Iterator[Metric]:
        """OpenAI's API's completions (vLLM's ``vllm:*`` names, with Podium's prefix)."""
        prompt = _counter("podium_prompt_tokens", "Prompt tokens of OpenAI completions.")
        generated = _counter("podium_generation_tokens", "Tokens generated for OpenAI completions.")
        first = _histogram_family(
            "podium_time_to_first_token_seconds",
            "Time from an OpenAI completion's arrival to its first generated token.",
        )
        per_token = _histogram_family(
            "podium_time_per_output_token_seconds",
            "Time per generated token after the first, per choice (inter-token latency).",
        )
        finished = _counter(
            "podium_request_success",
            "OpenAI completion choices finished, by finish_reason (stop, length, abort).",
            "finished_reason",
        )
        for mv in versions:
            t = mv.stats.tokens
            if not (t.prompt or t.finished):
                continue
            labels = _labels(mv)
            prompt.add_metric(labels, t.prompt)
            generated.add_metric(labels, t.generated)
            _histogram(first, labels, t.first_token)
            _histogram(per_token, labels, t.per_token)
            for reason, n in sorted(t.finished.items()):
                finished.add_metric([*labels, reason], n)
        yield from (prompt, generated, first, per_token, finished)

    @staticmethod
    def _batches(
        family: HistogramMetricFamily, labels: list[str], by_size: Mapping[int, tuple[int, int]]
    ) -> None:
        counts = [0] * (len(BATCH_BUCKETS) + 1)
        requests = 0
        for size, (count, _) in by_size.items():
            index = next((i for i, b in enumerate(BATCH_BUCKETS) if size <= b), len(BATCH_BUCKETS))
            counts[index] += count
            requests += size * count
        family.add_metric(labels, _cumulative([*map(str, BATCH_BUCKETS), "+Inf"], counts), requests)

    # -- the state of each version ---------------------------------------------------------------

    def _state(self, versions: list[ModelVersion]) -> Iterator[Metric]:
        in_flight = _gauge(
            "podium_requests_in_flight", "Requests being served (waiting or running)."
        )
        queued = _gauge(
            "podium_requests_queued",
            "Requests waiting for a predict slot, a batch or room in a continuous batch.",
        )
        streams = _gauge("podium_streams_open", "Streaming requests open.")
        slots = _gauge("podium_predict_slots", "predict_concurrency slots of the ready workers.")
        busy = _gauge("podium_predict_slots_busy", "predict_concurrency slots in use.")
        running = _gauge(
            "podium_continuous_batch_requests", "Requests in the running continuous batches."
        )
        sequences = _gauge("podium_sequences_open", "Stateful sequences open.")
        workers = _gauge("podium_workers", "Workers by state (starting, ready, stopping).", "state")
        on = _gauge(
            "podium_worker_device",
            "1 for each worker, labelled with its device (cpu, cuda:N in the server's numbering).",
            "worker",
            "device",
        )
        ready = _gauge("podium_model_ready", "1 if the model version serves requests, else 0.")
        load = _gauge("podium_model_load_seconds", "How long the model version's last load took.")
        for mv in versions:
            labels = _labels(mv)
            stats = mv.stats
            counters = mv.statistics()
            in_flight.add_metric(labels, counters.get("in_flight", 0))
            queued.add_metric(labels, counters.get("waiting", 0) + counters.get("queued", 0))
            streams.add_metric(labels, stats.streams_open)
            slots.add_metric(labels, counters.get("slots", 0))
            busy.add_metric(labels, counters.get("busy", 0))
            if "active" in counters:
                running.add_metric(labels, counters["active"])
            if "sequences" in counters:
                sequences.add_metric(labels, counters["sequences"])
            by_state = dict.fromkeys(
                (WorkerState.STARTING, WorkerState.READY, WorkerState.STOPPING), 0
            )
            for info in mv.workers():
                if info.state in by_state:
                    by_state[info.state] += 1
                on.add_metric([*labels, str(info.id), info.device], 1)
            for state, n in by_state.items():
                workers.add_metric([*labels, state.value], n)
            # as the readiness routes say: loaded and not in trouble (DataPlane.model_ready)
            ready.add_metric(labels, 1 if mv.state is ModelState.READY and not mv.trouble() else 0)
            if stats.load_ns:
                load.add_metric(labels, stats.load_ns / 1e9)
        yield from (in_flight, queued, streams, slots, busy, running, sequences, workers, on)
        yield from (ready, load)

    def _cache(self, versions: list[ModelVersion]) -> Iterator[Metric]:
        """The response caches (``response_cache``): only versions that have one."""
        hits = _counter(
            "podium_response_cache_hits", "Calls answered from the version's response cache."
        )
        misses = _counter(
            "podium_response_cache_misses",
            "Cacheable calls the model answered (its answer then kept, unless too large).",
        )
        hit_time = _counter(
            "podium_response_cache_hit_seconds",
            "Time to look up and copy out the answers of hits (Triton's cache_hit).",
        )
        miss_time = _counter(
            "podium_response_cache_miss_seconds",
            "Time to look up misses and store their answers (Triton's cache_miss).",
        )
        evictions = _counter(
            "podium_response_cache_evictions",
            "Answers dropped: for room (size: LRU past max_bytes or max_entries) or by age (ttl).",
            "reason",
        )
        entries = _gauge("podium_response_cache_entries", "Answers held.")
        held = _gauge(
            "podium_response_cache_bytes", "Bytes the answers held count (data and overhead)."
        )
        limit = _gauge("podium_response_cache_max_bytes", "The cache's bound (max_bytes).")
        for mv in versions:
            cache = mv.cache
            if cache is None:
                continue
            labels = _labels(mv)
            counted = cache.stats
            hits.add_metric(labels, counted.hits)
            misses.add_metric(labels, counted.misses)
            hit_time.add_metric(labels, counted.hit_ns / 1e9)
            miss_time.add_metric(labels, counted.miss_ns / 1e9)
            evictions.add_metric([*labels, "size"], counted.evictions)
            evictions.add_metric([*labels, "ttl"], counted.expired)
            entries.add_metric(labels, counted.entries)
            held.add_metric(labels, counted.bytes)
            limit.add_metric(labels, cache.max_bytes)
        yield from (hits, misses, hit_time, miss_time, evictions, entries, held, limit)

    # -- the models' own -------------------------------------------------------------------------

    def _custom(self, versions: list[ModelVersion]) -> Iterator[Metric]:
        """The models' own metrics: one family per name across versions (a name that two
        models use with another kind or other labels keeps the first, with a warning)."""
        families: dict[str, tuple[Any, Any]] = {}
        for mv in versions:
            labels = _labels(mv)
            for family, series in mv.stats.custom.collect():
                found = families.get(family.name)
                if found is None:
                    found = families[family.name] = (self._family(family), family)
                elif found[1].kind is not family.kind or found[1].labelnames != family.labelnames:
                    if family.name not in self._clashes:
                        self._clashes.add(family.name)
                        logger.warning(
                            "metric '%s' of %s is a %s with labels %s, another model's is a %s "
                            "with labels %s: only the first is exported",
                            family.name,
                            mv.label,
                            family.kind.value,
                            list(family.labelnames),
                            found[1].kind.value,
                            list(found[1].labelnames),
                        )
                    continue
                metric: Any = found[0]
                for values, value in series:
                    if family.kind is Kind.HISTOGRAM:
                        if found[1].buckets != family.buckets:
                            continue
                        bounds = [floatToGoString(bound) for bound in family.buckets]
                        cumulative = _cumulative(bounds, value[:-1])
                        metric.add_metric([*labels, *values], cumulative, value[-1])
                    else:
                        metric.add_metric([*labels, *values], value)
        for metric, _ in families.values():
            yield metric

    @staticmethod
    def _family(family: Any) -> Metric:
        labels = [*_MV, *family.labelnames]
        doc = family.documentation or family.name
        if family.kind is Kind.COUNTER:
            if doc.startswith(_TS_COUNTER):
                return TorchServeFamily(family.name, doc, family.kind, labels)
            return CounterMetricFamily(family.name, doc, labels=labels)
        if family.kind is Kind.GAUGE:
            return GaugeMetricFamily(family.name, doc, labels=labels)
        return HistogramMetricFamily(family.name, doc, labels=labels)


#: The help text of a TorchServe handler's counter under ``--ts-metrics prometheus``
#: (``model.torchserve.ts_help``): written under its own name, as TorchServe writes it.
_TS_COUNTER = "Torchserve prometheus counter metric"


def metrics_registry(collector: PodiumCollector, *more: Any) -> CollectorRegistry:
    """A registry of Podium's collector, ``more`` collectors (TorchServe's names) and
    prometheus-client's default registry, read as one more collector (the process and platform
    collectors, and what a model records with prometheus-client itself in the server process)."""
    registry = CollectorRegistry(auto_describe=False)
    for each in (collector, *more, REGISTRY):
        registry.register(each)
    return registry


class MetricsApp:
    """The metrics listener's ASGI app: ``GET /metrics`` (and ``HEAD``), rendered by
    prometheus-client in the format the ``Accept`` header asks for."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        try:
            if scope["path"].rstrip("/") != "/metrics":
                raise NotFound(f"no route for {scope['method']} {scope['path']} (try GET /metrics)")
            if scope["method"] not in ("GET", "HEAD"):
                raise MethodNotAllowed(
                    f"/metrics does not accept {scope['method']}; use GET, HEAD", ("GET", "HEAD")
                )
            encoder, content_type = choose_encoder(
                (header(scope, b"accept") or b"").decode("latin-1")
            )
            body = encoder(self.registry)
            await send_body(send, 200, [(b"content-type", content_type.encode())], body)
        except MethodNotAllowed as exc:
            await send_error(send, exc, [(b"allow", b"GET, HEAD")])
        except PodiumError as exc:
            await send_error(send, exc)
        except Exception as exc:  # a collector failed: say so, the listener stays up
            logger.exception("collecting metrics failed")
            await send_error(send, PodiumError(f"collecting metrics failed: {exc}"))
