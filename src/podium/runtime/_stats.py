"""The counters of one model version: what ``/metrics`` (Prometheus) and the statistics
extension (Triton's ``ModelStatistics``) both read.

Plain integers and lists, changed only on the event loop's thread (the data plane, the
schedulers and the workers run there), so recording costs a few increments and no lock; the
readers run on the loop too and see a consistent state. Durations are nanoseconds from
``time.perf_counter_ns``. Who records what:

- the data plane: each request's end (:meth:`ProtocolStats.ended`: outcome, code, duration, by
  the protocol it came through), streams (open, first item, items);
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
import itertools
import time
from collections.abc import Iterable
from typing import Any

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
    "Executions",
    "Outcome",
    "ProtocolStats",
    "RestartReason",
    "SequenceEnd",
    "TokenStats",
    "VersionStats",
    "outcome_of",
    "postprocess",
    "preprocess",
]

_SHIFT = 16
_now = time.perf_counter_ns

#: Upper bounds of every duration histogram, in ns: powers of two from 2**16 (65.5 µs) to
#: 2**36 (68.7 s), then +Inf, for sub-millisecond and multi-second models alike. Powers of two,
#: so that a duration's bucket is its bit length (no search: see :meth:`Durations.add`).
DURATION_BUCKETS_NS: tuple[int, ...] = tuple(2 ** (_SHIFT + i) for i in range(21))

#: Bucket slots kept: one per bit length a duration (an int64 of ns) can have; those past the
#: last bound are all +Inf (folded when read: :meth:`Durations.cumulative`).
_SLOTS = 64 - _SHIFT


class Durations:
    """How many (:attr:`count`), how long in all (``ns``): Triton's ``StatisticDuration``; and
    how many fell in each bucket of :data:`DURATION_BUCKETS_NS` (``buckets``, not cumulative;
    read them with :meth:`cumulative`). The count is the buckets' sum, so that an observation
    costs two increments (every integer past 256 is a new object)."""

    __slots__ = ("ns", "buckets")

    def __init__(self) -> None:
        self.ns = 0
        self.buckets = [0] * _SLOTS

    @property
    def count(self) -> int:
        return sum(self.buckets)

    def add(self, ns: int) -> None:
        self.ns += ns
        # bucket i holds (2**(15+i), 2**(16+i)] ns: a shift and a bit count, not a search of the
        # bounds
        self.buckets[((ns or 1) - 1 >> _SHIFT).bit_length()] += 1

    def merge(self, other: Durations) -> None:
        self.ns += other.ns
        buckets = self.buckets
        for i, n in enumerate(other.buckets):
            buckets[i] += n

    @classmethod
    def total(cls, parts: Iterable[Durations]) -> Durations:
        """The sum of ``parts``, a new one."""
        found = cls()
        for part in parts:
            found.merge(part)
        return found

    def cumulative(self) -> list[int]:
        """How many took at most each bound of :data:`DURATION_BUCKETS_NS`, then in all
        (+Inf): what a Prometheus histogram's buckets say."""
        return [*itertools.accumulate(self.buckets[: len(DURATION_BUCKETS_NS)]), self.count]

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
    RESTARTED = "restarted"  # a request with the start flag began a new one under its id


class RestartReason(enum.Enum):
    """Why a worker was replaced (the ``reason`` label)."""

    CRASHED = "crashed"  # its process died
    RESPONSE_TIMEOUT = "response_timeout"  # a predict ran past response_timeout
    DEVICE_LOST = "device_lost"  # its device failed (a driver error)


class ComputeDelta:
    """What a worker process adds to its version's counters between two reports (picklable):
    ``preprocess`` / ``postprocess`` durations and its :class:`Executions`."""

    __slots__ = ("compute_input", "compute_output", "executions")

    def __init__(self) -> None:
        self.compute_input = Durations()
        self.compute_output = Durations()
        self.executions = Executions()


class TokenStats:
    """The tokens of the completions a version generated (OpenAI's API, vLLM's metrics): prompt
    and generated tokens, each request's time to its first token and the time per output token
    after it, and the requests finished by ``finish_reason``."""

    __slots__ = ("prompt", "generated", "first_token", "per_token", "finished")

    def __init__(self) -> None:
        self.prompt = 0
        self.generated = 0
        self.first_token = Durations()
        self.per_token = Durations()
        self.finished: dict[str, int] = {}


class Executions:
    """Executions of ``predict``: their durations (``predict``, whose count is the executions)
    and those over 2 or more requests by size (``batched``). A version has these counts
    (:class:`VersionStats` is one), and so has each GPU it runs on (``by_device``, the
    statistics' ``device_stats``: docs/devices.md, "Seeing it"), which a worker on it adds to
    as it adds to the version's: a thread worker each execution, a worker process's parent
    each report of the process's counters."""

    __slots__ = ("predict", "batched")

    def __init__(self) -> None:
        self.predict = Durations()
        self.batched: dict[int, BatchStats] = {}  # executions over 2 or more requests

    def executed(self, size: int, ns: int) -> None:
        """One execution of ``predict`` over ``size`` requests that took ``ns``."""
        self.predict.add(ns)
        if size != 1:
            _add(self.batched, size, 1, ns)

    def merge_executions(self, other: Executions) -> None:
        """Add ``other``'s (a worker process's report)."""
        self.predict.merge(other.predict)
        for size, batch in other.batched.items():
            _add(self.batched, size, batch.count, batch.ns)

    @property
    def inferences(self) -> int:
        """The requests the executions ran (a continuous step's are counted apart, as
        :attr:`VersionStats.infer_count` does)."""
        return self.predict.count + sum((b.size - 1) * b.count for b in self.batched.values())


class VersionStats(Executions):
    """The counters of one model version (see the module's docstring).

    Triton's statistics: ``success`` / ``fail`` are the sums of :attr:`protocols` (``ok``,
    ``failed``); ``queue``, ``compute_input``, ``compute_output`` are per request;
    :attr:`infer_count` / :attr:`infer_ns` too (a batch's time counted once for each of its
    requests); ``predict`` is per execution (its count is ``execution_count``), and
    :meth:`by_size` gives the executions by the number of requests they ran.

    Executions over one request, the common case, cost one :meth:`Durations.add`: only the
    others are kept by size (``batched``: batches; ``stepped``: continuous steps), and those of
    one request are what ``predict`` holds beyond them.
    """

    __slots__ = (
        "protocols",
        "queue",
        "unqueued",
        "compute_input",
        "compute_output",
        "stepped_by",
        "generated_count",
        "generated_ns",
        "last_ns",
        "streams_open",
        "first_item",
        "items",
        "steps",
        "sequences_ended",
        "restarts",
        "out_of_memory",
        "by_device",
        "lost_devices",
        "load_ns",
        "custom",
        "tokens",
    )

    def __init__(self, custom: MetricStore | None = None) -> None:
        super().__init__()
        #: by ``WireProtocol.index``
        self.protocols = [ProtocolStats(p) for p in WireProtocol]
        self.queue = Durations()
        #: requests that took a slot at once (a queue time of 0, counted apart: the common case
        #: costs one increment)
        self.unqueued = 0
        self.compute_input = Durations()
        self.compute_output = Durations()
        self.stepped_by: dict[int, BatchStats] = {}  # continuous steps, by batch size
        self.generated_count = 0  # requests of continuous batches that ended...
        self.generated_ns = 0  # ...and their time from joining a batch to their end
        self.last_ns = 0  # perf_counter_ns when the last request ended; 0: none yet
        self.streams_open = 0
        self.first_item = Durations()
        self.items = 0
        self.steps = 0
        self.sequences_ended: dict[SequenceEnd, int] = {}
        self.restarts: dict[RestartReason, int] = {}
        #: requests failed by a device out of memory, by device ("cuda:0")
        self.out_of_memory: dict[str, int] = {}
        #: what ran on each GPU ("cuda:0"), for the statistics extension
        self.by_device: dict[str, Executions] = {}
        #: devices lost under a worker, by device
        self.lost_devices: dict[str, int] = {}
        self.load_ns = 0  # how long the last load took; 0: not loaded yet
        #: the model's own metrics (podium.metrics, TorchServe's and MLServer's APIs)
        self.custom = custom if custom is not None else MetricStore()
        #: what OpenAI's API generated with this version (server/openai)
        self.tokens = TokenStats()

    # -- recording ------------------------------------------------------------------------------

    def stepped(self, size: int, ns: int) -> None:
        """One step of a continuous batch of ``size`` requests (an execution); each request's
        own compute time is counted when it ends (:meth:`generated`)."""
        self.steps += 1
        self.predict.add(ns)
        _add(self.stepped_by, size, 1, ns)

    def generated(self, ns: int) -> None:
        """A request of a continuous batch ended, ``ns`` after it joined the batch."""
        self.generated_count += 1
        self.generated_ns += ns

    def sequence_ended(self, reason: SequenceEnd) -> None:
        self.sequences_ended[reason] = self.sequences_ended.get(reason, 0) + 1

    def restarted(self, reason: RestartReason) -> None:
        self.restarts[reason] = self.restarts.get(reason, 0) + 1

    def on_device(self, device: str) -> Executions:
        """The counts of ``device`` ("cuda:1"), which a worker on it adds to."""
        counts = self.by_device.get(device)
        if counts is None:
            counts = self.by_device[device] = Executions()
        return counts

    def out_of_memory_on(self, device: str) -> None:
        """A request failed: ``device`` ran out of memory."""
        self.out_of_memory[device] = self.out_of_memory.get(device, 0) + 1

    def device_lost(self, device: str) -> None:
        """A worker's ``device`` failed (its worker is replaced; the error is logged)."""
        self.lost_devices[device] = self.lost_devices.get(device, 0) + 1

    # -- reading ------------------------------------------------------------------------------

    @property
    def execution_count(self) -> int:
        return self.predict.count

    def _single(self) -> tuple[int, int]:
        """Executions over one request (batches and steps aside): their count and ns."""
        count, ns = self.predict.count, self.predict.ns
        for by in (self.batched, self.stepped_by):
            for batch in by.values():
                count -= batch.count
                ns -= batch.ns
        return count, ns

    def by_size(self) -> dict[int, tuple[int, int]]:
        """Executions by how many requests they ran (continuous steps by their batch's size):
        (count, ns) each."""
        found: dict[int, tuple[int, int]] = {}
        single = self._single()
        if single[0]:
            found[1] = single
        for by in (self.batched, self.stepped_by):
            for size, batch in by.items():
                count, ns = found.get(size, (0, 0))
                found[size] = (count + batch.count, ns + batch.ns)
        return found

    @property
    def infer_count(self) -> int:
        """Requests run through ``predict`` (Triton's compute_infer count, inference_count)."""
        single = self._single()[0]
        return single + sum(b.size * b.count for b in self.batched.values()) + self.generated_count

    @property
    def infer_ns(self) -> int:
        """Their time in ``predict``, a batch's counted once for each of its requests."""
        single = self._single()[1]
        return single + sum(b.size * b.ns for b in self.batched.values()) + self.generated_ns

    def queue_durations(self) -> Durations:
        """``queue`` with the requests that did not wait (0 ns) counted in."""
        found = Durations.total((self.queue,))
        found.buckets[0] += self.unqueued
        return found

    def success(self) -> Durations:
        """Every successful request (Triton's ``success``)."""
        return Durations.total(p.ok for p in self.protocols)

    def fail(self) -> Durations:
        """Every request that did not succeed (Triton's ``fail``)."""
        return Durations.total(p.failed for p in self.protocols)

    def last_inference_ms(self) -> int:
        """When the last request ended, in milliseconds since the epoch (0: never)."""
        if not self.last_ns:
            return 0
        offset = time.time_ns() - time.perf_counter_ns()
        return (self.last_ns + offset) // 1_000_000

    # -- worker processes -----------------------------------------------------------------------

    def take_compute(self) -> ComputeDelta | None:
        """What was added to the compute counters since the last call, which are zeroed in
        place (in a worker process, whose counters only feed the server's); None if nothing
        was."""
        if not (self.predict.count or self.compute_input.count or self.compute_output.count):
            return None
        delta = ComputeDelta()
        delta.compute_input.merge(self.compute_input)
        delta.compute_output.merge(self.compute_output)
        delta.executions.merge_executions(self)
        for mine in (self.compute_input, self.compute_output, self.predict):
            mine.ns = 0
            mine.buckets = [0] * len(mine.buckets)
        self.batched.clear()
        return delta

    def merge_compute(self, delta: ComputeDelta, on: Executions | None = None) -> None:
        """Add what a worker process reported (and to ``on``, its GPU's counts, if given)."""
        if on is not None:
            on.merge_executions(delta.executions)
        self.compute_input.merge(delta.compute_input)
        self.compute_output.merge(delta.compute_output)
        self.merge_executions(delta.executions)


def _add(by: dict[int, BatchStats], size: int, count: int, ns: int) -> None:
    """``count`` executions over ``size`` requests that took ``ns``, into ``by`` (by size)."""
    batch = by.get(size)
    if batch is None:
        batch = by[size] = BatchStats(size)
    batch.count += count
    batch.ns += ns


async def preprocess(stats: VersionStats, model: Any, inputs: Any, request: Any) -> Any:
    """``model.preprocess(inputs, request)`` (an instance, or a pool's preprocessor), its time
    counted as the version's ``compute_input``."""
    start = _now()
    inputs = await model.preprocess(inputs, request)
    stats.compute_input.add(_now() - start)
    return inputs


async def postprocess(stats: VersionStats, model: Any, outputs: Any, request: Any) -> Any:
    """``model.postprocess(outputs, request)``, its time counted as ``compute_output``."""
    start = _now()
    outputs = await model.postprocess(outputs, request)
    stats.compute_output.add(_now() - start)
    return outputs
