"""podium.metrics: the metrics a model records itself (its store, its handles, its scope) and
what a worker process reports of them."""

from __future__ import annotations

import logging
import pickle
import threading

import pytest

from podium import metrics
from podium.metrics import Kind, MetricStore, recording_to


def series(store: MetricStore, name: str) -> dict[tuple[str, ...], object]:
    return {
        labels: value
        for family, found in store.collect()
        if family.name == name
        for labels, value in found
    }


def test_metrics_belong_to_the_store_in_scope() -> None:
    store = MetricStore()
    with recording_to(store):
        calls = metrics.counter("calls", "calls made")
        load = metrics.gauge("load", "load now", ["device"])
        sizes = metrics.histogram("sizes", "sizes seen", buckets=(1, 10))
    calls.inc()
    calls.inc(2.5)
    load.labels(device="cpu").set(3)
    load.labels("cpu").inc()
    load.labels(device="gpu").dec(2)
    for value in (0.5, 1, 5, 50):
        sizes.observe(value)
    assert series(store, "calls") == {(): 3.5}
    assert series(store, "load") == {("cpu",): 4.0, ("gpu",): -2.0}
    # per bucket (<= 1, <= 10, +Inf), then the sum
    assert series(store, "sizes") == {(): [2.0, 1.0, 1.0, 56.5]}
    kinds = {f.name: (f.kind, f.documentation, f.labelnames) for f, _ in store.collect()}
    assert kinds["load"] == (Kind.GAUGE, "load now", ("device",))


def test_a_metric_without_labels_shows_zero_at_once() -> None:
    store = MetricStore()
    with recording_to(store):
        metrics.counter("made")
    assert series(store, "made") == {(): 0.0}


def test_creating_a_metric_again_returns_the_same_one_and_a_clash_is_refused() -> None:
    store = MetricStore()
    with recording_to(store):
        metrics.counter("calls").inc()
        metrics.counter("calls").inc()
        with pytest.raises(ValueError, match="exists already as a counter"):
            metrics.gauge("calls")
        with pytest.raises(ValueError, match="exists already"):
            metrics.counter("calls", labelnames=["kind"])
    assert series(store, "calls") == {(): 2.0}


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda: metrics.counter("bad-name"), "not a Prometheus name"),
        (lambda: metrics.counter("podium_mine"), "Podium's own"),
        (lambda: metrics.counter("ok", labelnames=["model"]), "Podium's own"),
        (lambda: metrics.counter("ok", labelnames=["version"]), "Podium's own"),
        (lambda: metrics.counter("ok", labelnames=["a", "a"]), "twice"),
        (lambda: metrics.counter("ok", labelnames=["__x"]), "not a Prometheus label"),
        (lambda: metrics.histogram("ok", labelnames=["le"]), "'le'"),
        (lambda: metrics.histogram("ok", buckets=(2, 1)), "increasing"),
    ],
)
def test_bad_metrics_are_refused_when_made(make: object, words: str) -> None:
    with recording_to(MetricStore()), pytest.raises(ValueError, match=words):
        make()  # type: ignore[operator]


def test_wrong_use_is_refused() -> None:
    with recording_to(MetricStore()):
        counter = metrics.counter("c", labelnames=["kind"])
    with pytest.raises(ValueError, match="only goes up"):
        counter.labels(kind="a").inc(-1)
    with pytest.raises(ValueError, match=r"record through \.labels"):
        counter.inc()
    with pytest.raises(ValueError, match="takes the labels"):
        counter.labels(other="a")
    with pytest.raises(ValueError, match="no labels left"):
        counter.labels(kind="a").labels(kind="b")


def test_a_metric_made_outside_a_model_records_nothing_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, "podium.metrics"):
        stray = metrics.counter("stray_metric_of_this_test")
        stray.inc()  # nothing happens, nothing breaks
        metrics.counter("stray_metric_of_this_test")
    warned = [r for r in caplog.records if "stray_metric_of_this_test" in r.getMessage()]
    assert len(warned) == 1 and "records nothing" in warned[0].getMessage()


def test_recording_from_many_threads_loses_nothing() -> None:
    store = MetricStore(forward=True)
    with recording_to(store):
        counter = metrics.counter("hits")
        histogram = metrics.histogram("values", buckets=(1,))

    def work() -> None:
        for _ in range(2000):
            counter.inc()
            histogram.observe(0.5)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert series(store, "hits") == {(): 8000.0}
    taken = {spec[0]: value for spec, _, value in store.take()}
    assert taken["hits"] == 8000.0
    assert taken["values"] == [8000.0, 0.0, 4000.0]


def test_a_worker_process_reports_changes_and_the_server_adds_them_up() -> None:
    server = MetricStore()
    for life in range(2):  # a worker process, then its replacement: totals carry on
        worker = MetricStore(forward=True)
        with recording_to(worker):
            calls = metrics.counter("calls", labelnames=["kind"])
            depth = metrics.gauge("depth")
            latency = metrics.histogram("latency", buckets=(1,))
        assert not worker.dirty
        calls.labels(kind="a").inc(2)
        depth.set(5 + life)
        latency.observe(3)
        assert worker.dirty
        report = pickle.loads(pickle.dumps(worker.take()))  # it crosses the socket
        assert not worker.dirty and worker.take() == []
        server.apply(report)
    assert series(server, "calls") == {("a",): 4.0}
    assert series(server, "depth") == {(): 6.0}  # a gauge: the last value reported
    assert series(server, "latency") == {(): [0.0, 2.0, 6.0]}


def test_a_report_that_clashes_is_dropped(caplog: pytest.LogCaptureFixture) -> None:
    server = MetricStore()
    with recording_to(server):
        metrics.gauge("x")
    worker = MetricStore(forward=True)
    with recording_to(worker):
        metrics.counter("x").inc()
    with caplog.at_level(logging.WARNING, "podium.metrics"):
        server.apply(worker.take())
    assert series(server, "x") == {(): 0.0}
    assert "clashes" in caplog.text


def test_histogram_time_observes_seconds() -> None:
    store = MetricStore()
    with recording_to(store):
        timed = metrics.histogram("block", buckets=(60,))
    with timed.time():
        pass
    (value,) = series(store, "block").values()
    assert value[0] == 1.0 and 0 <= value[-1] < 60  # type: ignore[index]
