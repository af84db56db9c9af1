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
    assert DURATION_BUCKETS_NS[0] == 65_536 and DURATION_BUCKETS_NS[-1] == 2**36  # 68.7 s
    d = Durations()
    for ns in (0, 1, 65_536, 65_537, 2**36, 2**36 + 1, 2**62):
        d.add(ns)
    assert (d.count, d.ns) == (7, 1 + 65_536 + 65_537 + 2**36 + 2**36 + 1 + 2**62)
    cumulative = d.cumulative()
    assert len(cumulative) == len(DURATION_BUCKETS_NS) + 1
    assert cumulative[0] == 3  # <= 65.5 µs (the bound is inclusive, as Prometheus's le)
    assert cumulative[1] == 4  # <= 131 µs
    assert cumulative[-3] == 4 and cumulative[-2] == 5  # <= 2**35, <= 2**36 ns
    assert cumulative[-1] == 7  # +Inf
    for i, bound in enumerate(DURATION_BUCKETS_NS):  # each bound falls in its own bucket
        one = Durations()
        one.add(bound)
        one.add(bound + 1)
        assert one.cumulative()[i] == 1 and one.cumulative()[-1] == 2
    other = Durations()
    other.merge(d)
    other.merge(d)
    assert other.count == 14 and other.cumulative()[-1] == 14


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
    stats.executed(1, 200)
    assert stats.execution_count == 4
    assert stats.infer_count == 10
    assert (stats.infer_count, stats.infer_ns) == (10, 300 + 4 * 1_000 + 4 * 3_000)
    assert stats.by_size() == {1: (2, 300), 4: (2, 4_000)}
    stats.stepped(3, 500)  # a continuous batch's step...
    stats.stepped(1, 50)
    stats.generated(2_000)  # ...and one of its requests, when it ends
    assert stats.steps == 2 and stats.execution_count == 6
    assert stats.by_size() == {1: (3, 350), 3: (1, 500), 4: (2, 4_000)}
    assert stats.infer_count == 11 and stats.infer_ns == 16_300 + 2_000


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
    predict = worker.predict  # a worker keeps a reference: zeroed in place, never replaced
    worker.compute_input.add(10)
    worker.executed(2, 100)
    worker.executed(1, 30)
    worker.compute_output.add(20)
    worker.queue.add(5)  # the worker's own wait: not reported (the server counts the queue)
    delta = pickle.loads(pickle.dumps(worker.take_compute()))
    assert worker.take_compute() is None  # taken: zeroed
    assert worker.predict is predict and predict.count == 0 and sum(predict.buckets) == 0
    server = VersionStats()
    server.executed(1, 7)
    server.merge_compute(delta)
    server.merge_compute(delta)  # a second worker process's report adds up too
    assert server.execution_count == 5 and server.infer_count == 7
    assert (server.compute_input.count, server.compute_output.ns) == (2, 40)
    assert server.by_size() == {1: (3, 67), 2: (2, 200)}
    assert server.queue.count == 0
