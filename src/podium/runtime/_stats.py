"""The counters of one model version: what ``/metrics`` (Prometheus) and the statistics
extension (Triton's ``ModelStatistics``) both read.

Plain integers and lists, changed only on the event loop's thread (the data plane, the
schedulers and the workers run there), so recording costs a few increments and no lock; the
readers run on the loop too and see a consistent state. Durations are nanoseconds from
``time.perf_counter_ns``. Who records what:

- the data plane: each request's end (:meth:`ProtocolStats.ended`: outcome, code, duration, by
  the protocol it came through), requests in flight, streams (open, first item, items);
- the schedulers: time waiting for a slot or a batch (``queue``), ``preprocess``
  (``compute_input``) and ``postprocess`` (``compute_output``) of each request;
- the workers: each execution of ``predict`` (:meth:`VersionStats.executed`: a request, a
  batch, a stream, a continuous batch's step);
- the pool and the sequence scheduler: restarts, sequences ended, the load time.

A worker process keeps its own and sends what it adds (:meth:`VersionStats.take_compute`) to
the server, which adds it here (:meth:`VersionStats.merge_compute`).
"""

from __future__ import annotations

import asyncio
import enum
import time
from bisect import bisect_left

from ..errors import (
    Cancelled,
    PodiumError,
    ResponseTimeout,
    Unavailable,
    WorkerDied,
    grpc_code,
    http_status,
)
from ..metrics import MetricStore
from ..types import WireProtocol

__all__ = [
    "DURATION_BUCKETS_NS",
    "BatchStats",
    "ComputeDelta",
    "Durations",
    "Outcome",
    "ProtocolStats",
    "RestartReason",
    "SequenceEnd",
    "VersionStats",
    "outcome_of",
]

#: Upper bounds of every duration histogram, in ns: 100 µs to 60 s (then +Inf), for
#: sub-millisecond and multi-second models alike.
DURATION_BUCKETS_NS: tuple[int, ...] = (
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
    30_000_000_000,
    60_000_000_000,
)

_BOUNDS = DURATION_BUCKETS_NS


class Durations:
    """How many, how long in all (Triton's ``StatisticDuration``: ``count``, ``ns``), and how
    many fell in each bucket of :data:`DURATION_BUCKETS_NS` (``buckets``, not cumulative; the
    last is +Inf)."""

    __slots__ = ("count", "ns", "buckets")

    def __init__(self) -> None:
        self.count = 0
        self.ns = 0
        self.buckets = [0] * (len(_BOUNDS) + 1)

    def add(self, ns: int) -> None:
        self.count += 1
        self.ns += ns
        self.buckets[bisect_left(_BOUNDS, ns)] += 1

    def merge(self, other: Durations) -> None:
        self.count += other.count
        self.ns += other.ns
        buckets = self.buckets
        for i, n in enumerate(other.buckets):
            buckets[i] += n

    def __repr__(self) -> str:
        return f"Durations(count={self.count}, ns={self.ns})"


class Outcome(enum.Enum):
    """How a request ended (the ``outcome`` label)."""

    SUCCESS = "success"
    CLIENT_ERROR = "client_error"  # 4xx: the request was wrong (bad input, unknown, closed)
    SERVER_ERROR = "server_error"  # 5xx: the model raised, or a bug
    CANCELLED = "cancelled"  # the client left before its answer
    TIMEOUT = "timeout"  # predict ran past response_timeout
    WORKER_DIED = "worker_died"  # the worker running it died
    REJECTED = "rejected"  # refused at once: queue full, too many sequences, not ready, stopped


_OK = {False: "200", True: "OK"}  # the ordinary success code, by protocol.grpc
_CANCELLED = {False: "499", True: "CANCELLED"}
_classified: dict[tuple[type[BaseException], bool], tuple[Outcome, str]] = {}


def outcome_of(exc: BaseException, grpc: bool) -> tuple[Outcome, str]:
    """The outcome and the code (the HTTP status, or the gRPC code's name when ``grpc``) of a
    request that raised ``exc`` (the errors table decides the code); cached per class."""
    key = (type(exc), grpc)
    found = _classified.get(key)
    if found is not None:
        return found
    if isinstance(exc, asyncio.CancelledError | Cancelled | GeneratorExit):
        found = (Outcome.CANCELLED, _CANCELLED[grpc])
    elif isinstance(exc, PodiumError):
        status = http_status(exc)
        code = grpc_code(exc) if grpc else str(status)
        if isinstance(exc, ResponseTimeout):
            found = (Outcome.TIMEOUT, code)
        elif isinstance(exc, WorkerDied):
            found = (Outcome.WORKER_DIED, code)
        elif isinstance(exc, Unavailable):
            found = (Outcome.REJECTED, code)
        elif status < 500:
            found = (Outcome.CLIENT_ERROR, code)
        else:
            found = (Outcome.SERVER_ERROR, code)
    else:
        found = (Outcome.SERVER_ERROR, "UNKNOWN" if grpc else "500")
    _classified[key] = found
    return found


def status_outcome(status: int) -> Outcome:
    """The outcome of an answer a model gave with an HTTP status of its choosing."""
    if status < 400:
        return Outcome.SUCCESS
    return Outcome.CLIENT_ERROR if status < 500 else Outcome.SERVER_ERROR


class ProtocolStats:
    """The requests of one version that came through one protocol.

    ``ok``: the successful ones, ``failed``: the others (count, ns, histogram each); ``codes``:
    how many ended with each (outcome, code) other than a success with the protocol's ordinary
    code (``200`` / ``OK``), which is ``ok.count`` less the other successes.
    """

    __slots__ = ("protocol", "ok", "failed", "codes")

    def __init__(self, protocol: WireProtocol) -> None:
        self.protocol = protocol
        self.ok = Durations()
        self.failed = Durations()
        self.codes: dict[tuple[Outcome, str], int] = {}

    def ended(self, outcome: Outcome, code: str, ns: int) -> None:
        """A request that did not end in an ordinary success."""
        (self.ok if outcome is Outcome.SUCCESS else self.failed).add(ns)
        key = (outcome, code)
        self.codes[key] = self.codes.get(key, 0) + 1

    def failed_with(self, exc: BaseException, ns: int) -> None:
        outcome, code = outcome_of(exc, self.protocol.grpc)
        self.ended(outcome, code, ns)

    def refused(self, exc: BaseException) -> None:
        """A request refused before it reached the model (its body did not parse): counted by
        outcome and code, not in the durations (Triton's statistics leave it out too)."""
        key = outcome_of(exc, self.protocol.grpc)
        self.codes[key] = self.codes.get(key, 0) + 1

    def answered(self, status: int, ns: int) -> None:
        """A success whose HTTP status the model chose (a handler's reply)."""
        if status == 200:
            self.ok.add(ns)
        else:
            self.ended(status_outcome(status), str(status), ns)

    def counts(self) -> dict[tuple[Outcome, str], int]:
        """Requests by (outcome, code), every one."""
        counts = dict(self.codes)
        others = sum(n for (outcome, _), n in counts.items() if outcome is Outcome.SUCCESS)
        ordinary = self.ok.count - others
        if ordinary:
            counts[(Outcome.SUCCESS, _OK[self.protocol.grpc])] = ordinary
        return counts


class BatchStats:
    """The executions of ``predict`` over ``size`` requests (Triton's batch statistics):
    ``count`` of them and their ``ns``."""

    __slots__ = ("size", "count", "ns")

    def __init__(self, size: int) -> None:
        self.size = size
        self.count = 0
        self.ns = 0


class SequenceEnd(enum.Enum):
    """Why a stateful sequence ended (the ``reason`` label)."""

    REQUEST = "request"  # a request said it was the last
    MODEL = "model"  # the model ended it (Context.end())
    IDLE = "idle"  # idle longer than sequence_max_idle_ms
    TIMEOUT = "timeout"  # older than sequence_timeout_ms
    WORKER_LOST = "worker_lost"  # its worker died or was retired: its state is gone


class RestartReason(enum.Enum):
    """Why a worker was replaced (the ``reason`` label)."""

    CRASHED = "crashed"  # its process died
    RESPONSE_TIMEOUT = "response_timeout"  # a predict ran past response_timeout


class ComputeDelta:
    """What a worker process adds to its version's counters between two reports (picklable):
    ``preprocess`` / ``postprocess`` / ``predict`` durations and the executions by size."""

    __slots__ = ("compute_input", "compute_output", "predict", "infer_count", "infer_ns", "batches")

    def __init__(self) -> None:
        self.compute_input = Durations()
        self.compute_output = Durations()
        self.predict = Durations()
        self.infer_count = 0
        self.infer_ns = 0
        self.batches: dict[int, tuple[int, int]] = {}


class VersionStats:
    """The counters of one model version (see the module's docstring).

    Triton's statistics: ``success`` / ``fail`` are the sums of :attr:`protocols` (``ok``,
    ``failed``); ``queue``, ``compute_input``, ``compute_output`` are per request,
    ``infer_count`` / ``infer_ns`` too (a batch's time counted once for each of its
    requests); ``predict`` is per execution (its count is ``execution_count``), and
    ``batches`` by execution size; ``inference_count`` counts requests run.
    """

    __slots__ = (
        "protocols",
        "queue",
        "unqueued",
        "compute_input",
        "compute_output",
        "predict",
        "infer_count",
        "infer_ns",
        "inference_count",
        "single",
        "batches",
        "last_ns",
        "in_flight",
        "streams_open",
        "first_item",
        "items",
        "steps",
        "sequences_ended",
        "restarts",
        "load_ns",
        "custom",
    )

    def __init__(self, custom: MetricStore | None = None) -> None:
        #: by ``WireProtocol.index``
        self.protocols = [ProtocolStats(p) for p in WireProtocol]
        self.queue = Durations()
        #: requests that took a slot at once (a queue time of 0, counted apart: the common case
        #: costs one increment)
        self.unqueued = 0
        self.compute_input = Durations()
        self.compute_output = Durations()
        self.predict = Durations()
        self.infer_count = 0
        self.infer_ns = 0
        self.inference_count = 0
        self.single = BatchStats(1)  # executions over one request: no dict lookup
        self.batches: dict[int, BatchStats] = {1: self.single}
        self.last_ns = 0  # perf_counter_ns when the last request ended; 0: none yet
        self.in_flight = 0
        self.streams_open = 0
        self.first_item = Durations()
        self.items = 0
        self.steps = 0
        self.sequences_ended: dict[SequenceEnd, int] = {}
        self.restarts: dict[RestartReason, int] = {}
        self.load_ns = 0  # how long the last load took; 0: not loaded yet
        #: the model's own metrics (podium.metrics, TorchServe's and MLServer's APIs)
        self.custom = custom if custom is not None else MetricStore()

    # -- recording ------------------------------------------------------------------------------

    def executed(self, size: int, ns: int) -> None:
        """One execution of ``predict`` over ``size`` requests that took ``ns``."""
        self.predict.add(ns)
        self.infer_count += size
        self.infer_ns += size * ns
        self.inference_count += size
        if size == 1:
            batch = self.single
        else:
            found = self.batches.get(size)
            batch = found if found is not None else self.batches.setdefault(size, BatchStats(size))
        batch.count += 1
        batch.ns += ns

    def stepped(self, size: int, ns: int) -> None:
        """One step of a continuous batch of ``size`` requests (an execution); each request's
        own compute time is counted when it ends (:meth:`generated`)."""
        self.steps += 1
        self.predict.add(ns)
        found = self.batches.get(size)
        batch = found if found is not None else self.batches.setdefault(size, BatchStats(size))
        batch.count += 1
        batch.ns += ns

    def generated(self, ns: int) -> None:
        """A request of a continuous batch ended, ``ns`` after it joined the batch."""
        self.infer_count += 1
        self.infer_ns += ns
        self.inference_count += 1

    def sequence_ended(self, reason: SequenceEnd) -> None:
        self.sequences_ended[reason] = self.sequences_ended.get(reason, 0) + 1

    def restarted(self, reason: RestartReason) -> None:
        self.restarts[reason] = self.restarts.get(reason, 0) + 1

    # -- reading --------------------------------------------------------------------------------

    @property
    def execution_count(self) -> int:
        return self.predict.count

    def queue_durations(self) -> Durations:
        """``queue`` with the requests that did not wait (0 ns) counted in."""
        found = Durations()
        found.merge(self.queue)
        found.count += self.unqueued
        found.buckets[0] += self.unqueued
        return found

    def success(self) -> Durations:
        """Every successful request (Triton's ``success``)."""
        found = Durations()
        for p in self.protocols:
            found.merge(p.ok)
        return found

    def fail(self) -> Durations:
        """Every request that did not succeed (Triton's ``fail``)."""
        found = Durations()
        for p in self.protocols:
            found.merge(p.failed)
        return found

    def last_inference_ms(self) -> int:
        """When the last request ended, in milliseconds since the epoch (0: never)."""
        if not self.last_ns:
            return 0
        offset = time.time_ns() - time.perf_counter_ns()
        return (self.last_ns + offset) // 1_000_000

    # -- worker processes -----------------------------------------------------------------------

    def take_compute(self) -> ComputeDelta | None:
        """What was added to the compute counters since the last call, which are zeroed (in a
        worker process, whose counters only feed the server's); None if nothing was."""
        if not (self.predict.count or self.compute_input.count or self.compute_output.count):
            return None
        delta = ComputeDelta()
        delta.compute_input, self.compute_input = self.compute_input, Durations()
        delta.compute_output, self.compute_output = self.compute_output, Durations()
        delta.predict, self.predict = self.predict, Durations()
        delta.infer_count, delta.infer_ns = self.infer_count, self.infer_ns
        self.infer_count = self.infer_ns = self.inference_count = 0
        delta.batches = {size: (b.count, b.ns) for size, b in self.batches.items() if b.count}
        self.single = BatchStats(1)
        self.batches = {1: self.single}
        return delta

    def merge_compute(self, delta: ComputeDelta) -> None:
        """Add what a worker process reported."""
        self.compute_input.merge(delta.compute_input)
        self.compute_output.merge(delta.compute_output)
        self.predict.merge(delta.predict)
        self.infer_count += delta.infer_count
        self.infer_ns += delta.infer_ns
        self.inference_count += delta.infer_count
        for size, (count, ns) in delta.batches.items():
            batch = self.batches.get(size)
            if batch is None:
                batch = self.batches[size] = BatchStats(size)
            batch.count += count
            batch.ns += ns
