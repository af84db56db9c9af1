"""runtime/_stats: the counters of a model version, as the schedulers, the workers and the data
plane record them and as the metrics and the statistics extension read them."""

from __future__ import annotations

import asyncio
import pickle
import time

import pytest

from podium.errors import (
    BadModelOutput,
    InvalidInput,
    ModelNotReady,
    NotFound,
    QueueFull,
    ResponseTimeout,
    SequenceClosed,
    SequenceLimit,
    WorkerDied,
)
from podium.runtime import DURATION_BUCKETS_NS, Outcome, VersionStats
from podium.runtime._stats import Durations, outcome_of
from podium.types import WireProtocol


def test_durations_count_sum_and_bucket() -> None:
    d = Durations()
    for ns in (0, 100_000, 100_001, 59_000_000_000, 61_000_000_000):
        d.add(ns)
    assert (d.count, d.ns) == (5, 120_000_200_001)
    assert d.buckets[0] == 2  # <= 100 µs (the bound is inclusive, as Prometheus's le)
    assert d.buckets[1] == 1  # <= 250 µs
    assert d.buckets[len(DURATION_BUCKETS_NS) - 1] == 1  # <= 60 s
    assert d.buckets[-1] == 1  # +Inf
    other = Durations()
    other.merge(d)
    other.merge(d)
    assert other.count == 10 and sum(other.buckets) == 10


@pytest.mark.parametrize(
    ("exc", "rest", "grpc"),
    [
        (asyncio.CancelledError(), (Outcome.CANCELLED, "499"), (Outcome.CANCELLED, "CANCELLED")),
        (GeneratorExit(), (Outcome.CANCELLED, "499"), (Outcome.CANCELLED, "CANCELLED")),
        (
            InvalidInput("x"),
            (Outcome.CLIENT_ERROR, "400"),
            (Outcome.CLIENT_ERROR, "INVALID_ARGUMENT"),
        ),
        (NotFound("x"), (Outcome.CLIENT_ERROR, "404"), (Outcome.CLIENT_ERROR, "NOT_FOUND")),
        (
            SequenceClosed("x"),
            (Outcome.CLIENT_ERROR, "410"),
            (Outcome.CLIENT_ERROR, "FAILED_PRECONDITION"),
        ),
        (BadModelOutput("x"), (Outcome.SERVER_ERROR, "500"), (Outcome.SERVER_ERROR, "INTERNAL")),
        (RuntimeError("bug"), (Outcome.SERVER_ERROR, "500"), (Outcome.SERVER_ERROR, "UNKNOWN")),
        (ResponseTimeout("x"), (Outcome.TIMEOUT, "504"), (Outcome.TIMEOUT, "DEADLINE_EXCEEDED")),
        (WorkerDied("x"), (Outcome.WORKER_DIED, "500"), (Outcome.WORKER_DIED, "INTERNAL")),
        (QueueFull("x"), (Outcome.REJECTED, "503"), (Outcome.REJECTED, "UNAVAILABLE")),
        (ModelNotReady("x"), (Outcome.REJECTED, "503"), (Outcome.REJECTED, "UNAVAILABLE")),
        (SequenceLimit("x"), (Outcome.REJECTED, "503"), (Outcome.REJECTED, "RESOURCE_EXHAUSTED")),
    ],
)
def test_each_error_has_its_outcome_and_the_code_of_the_errors_table(
    exc: BaseException, rest: tuple[Outcome, str], grpc: tuple[Outcome, str]
) -> None:
    assert outcome_of(exc, grpc=False) == rest
    assert outcome_of(exc, grpc=True) == grpc


def test_requests_by_protocol_outcome_and_code() -> None:
    stats = VersionStats()
    rest = stats.protocols[WireProtocol.TORCHSERVE_REST.index]
    assert rest.protocol is WireProtocol.TORCHSERVE_REST
    rest.ok.add(1_000)
    rest.ok.add(2_000)
    rest.answered(201, 3_000)  # a handler's own status
    rest.answered(404, 4_000)
    rest.failed_with(QueueFull("full"), 5_000)
    rest.refused(InvalidInput("bad json"))  # counted, without a duration
    grpc = stats.protocols[WireProtocol.OIP_GRPC.index]
    grpc.ok.add(6_000)
    assert rest.counts() == {
        (Outcome.SUCCESS, "200"): 2,
        (Outcome.SUCCESS, "201"): 1,
        (Outcome.CLIENT_ERROR, "404"): 1,
        (Outcome.REJECTED, "503"): 1,
        (Outcome.CLIENT_ERROR, "400"): 1,
    }
    assert grpc.counts() == {(Outcome.SUCCESS, "OK"): 1}
    success, fail = stats.success(), stats.fail()
    assert (success.count, success.ns) == (4, 12_000)
    assert (fail.count, fail.ns) == (2, 9_000)


def test_executions_are_counted_per_execution_and_per_request() -> None:
    stats = VersionStats()
    stats.executed(1, 100)
    stats.executed(4, 1_000)
    stats.executed(4, 3_000)
    assert stats.execution_count == 3
    assert stats.inference_count == 9
    assert (stats.infer_count, stats.infer_ns) == (9, 100 + 4 * 1_000 + 4 * 3_000)
    assert {s: (b.count, b.ns) for s, b in stats.batches.items()} == {1: (1, 100), 4: (2, 4_000)}
    stats.stepped(3, 500)  # a continuous batch's step...
    stats.generated(2_000)  # ...and one of its requests, when it ends
    assert stats.steps == 1 and stats.execution_count == 4
    assert stats.inference_count == 10 and stats.infer_ns == 16_100 + 2_000


def test_requests_that_did_not_wait_count_as_zero_queue_time() -> None:
    stats = VersionStats()
    stats.unqueued += 3
    stats.queue.add(2_000_000)
    queue = stats.queue_durations()
    assert (queue.count, queue.ns) == (4, 2_000_000)
    assert queue.buckets[0] == 3


def test_last_inference_is_in_epoch_milliseconds() -> None:
    stats = VersionStats()
    assert stats.last_inference_ms() == 0
    stats.last_ns = time.perf_counter_ns()
    assert abs(stats.last_inference_ms() - time.time() * 1000) < 1000


def test_a_worker_process_reports_its_compute_counters_once() -> None:
    worker = VersionStats()
    assert worker.take_compute() is None
    worker.compute_input.add(10)
    worker.executed(2, 100)
    worker.compute_output.add(20)
    worker.queue.add(5)  # the worker's own wait: not reported (the server counts the queue)
    delta = pickle.loads(pickle.dumps(worker.take_compute()))
    assert worker.take_compute() is None  # taken: zeroed
    server = VersionStats()
    server.executed(1, 7)
    server.merge_compute(delta)
    server.merge_compute(delta)  # a second worker process's report adds up too
    assert server.execution_count == 3 and server.inference_count == 5
    assert (server.compute_input.count, server.compute_output.ns) == (2, 40)
    assert {s: (b.count, b.ns) for s, b in server.batches.items()} == {1: (1, 7), 2: (2, 200)}
    assert server.queue.count == 0
