"""TorchServe's context.metrics (model/torchserve/_metrics): what a handler records lands in its
version's metric store, as TorchServe's metrics cache would record it."""

from __future__ import annotations

import logging

import pytest

from podium.metrics import Kind, MetricStore
from podium.model.torchserve import Dimension, MetricTypes, TorchServeMetrics

DEFAULTS = ("ModelName", "Level")


def recorded(
    store: MetricStore,
) -> dict[str, tuple[Kind, tuple[str, ...], dict[tuple[str, ...], object]]]:
    return {f.name: (f.kind, f.labelnames, dict(series)) for f, series in store.collect()}


def test_every_add_method_records_with_torchserves_default_dimensions() -> None:
    store = MetricStore()
    metrics = TorchServeMetrics(store, "m")
    metrics.add_counter("Handled", 2, None, [Dimension("kind", "rows")])
    metrics.add_counter("Handled", 3, None, [Dimension("kind", "rows")])
    metrics.add_time("HandlerTime", 12.5, None, "ms")
    metrics.add_time("HandlerTime", 7.0, None, "ms")  # a gauge: the last value
    metrics.add_size("Size", 0.5, None, "MB")
    metrics.add_percent("Load", 40.0)
    metrics.add_metric("Rows", 3, "count", metric_type=MetricTypes.HISTOGRAM)
    metrics.add_error("Errors", 1)
    found = recorded(store)
    model = ("m", "Model")
    assert found["Handled"] == (Kind.COUNTER, ("kind", *DEFAULTS), {("rows", *model): 5.0})
    assert found["HandlerTime"] == (Kind.GAUGE, DEFAULTS, {model: 7.0})
    assert found["Size"][2] == {model: 0.5}
    assert found["Load"][2] == {model: 40.0}
    assert found["Rows"][0] is Kind.HISTOGRAM and found["Rows"][2][model][-1] == 3.0  # type: ignore[index]
    assert found["Errors"] == (Kind.COUNTER, DEFAULTS, {model: 1.0})


def test_cached_metrics_update_with_their_own_dimensions() -> None:
    store = MetricStore()
    metrics = TorchServeMetrics(store, "m")
    cached = metrics.add_metric_to_cache("Calls", "count", ["route"], MetricTypes.COUNTER)
    cached.add_or_update(1, ["predictions"])
    metrics.get_metric("Calls", MetricTypes.COUNTER).add_or_update(2, ["predictions"])
    cached.update(4, "req-1", [Dimension("route", "explain")])
    gauge = metrics.add_metric_to_cache("Temp", "C", [], "gauge")  # a type by its value too
    gauge.add_or_update(21.5)
    assert recorded(store)["Calls"][2] == {("predictions",): 3.0, ("explain",): 4.0}
    assert recorded(store)["Temp"][2] == {(): 21.5}
    with pytest.raises(KeyError, match="does not exist"):
        metrics.get_metric("Nothing")


def test_wrong_calls_are_logged_as_torchserve_does(caplog: pytest.LogCaptureFixture) -> None:
    store = MetricStore()
    metrics = TorchServeMetrics(store, "m")
    cached = metrics.add_metric_to_cache("Calls", "count", ["route"])
    with caplog.at_level(logging.ERROR, "podium.model.torchserve"):
        cached.add_or_update(1, [])  # too few dimension values
        cached.add_or_update(-1, ["x"])  # a counter going down
        metrics.add_counter("Bad", 1, None, [Dimension("bad-name", "x")])
    assert recorded(store)["Calls"][2] == {}
    assert "Bad" not in recorded(store)
    assert caplog.text.count("metric") >= 3
    with pytest.raises(ValueError, match="unit"):
        metrics.add_time("T", 1, None, "hours")
    with pytest.raises(ValueError, match="unit"):
        metrics.add_size("S", 1, None, "TB")


def test_without_a_store_nothing_is_recorded_and_nothing_breaks() -> None:
    metrics = TorchServeMetrics(None, "m")
    metrics.add_counter("Handled", 1)
    metrics.add_metric_to_cache("Calls", "count", ["route"]).add_or_update(1, ["x"])
    metrics.set_request_ids({0: "a"})
    assert metrics.request_ids == {0: "a"}
