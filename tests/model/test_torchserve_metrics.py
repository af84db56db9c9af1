"""TorchServe's context.metrics (model/torchserve/_metrics): what a handler records lands in its
version's metric store, as TorchServe's metrics cache would record it."""

from __future__ import annotations

import logging
import re
import socket
from pathlib import Path

import pytest

from podium.errors import DefinitionError
from podium.metrics import Kind, MetricStore
from podium.model.torchserve import (
    TORCHSERVE_DEFAULT,
    Dimension,
    MetricTypes,
    TorchServeMetrics,
    read_metrics_yaml,
)

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


# -- metrics.yaml (metrics_config) ----------------------------------------------------------


def test_declared_model_metrics_are_in_the_cache_before_any_add(tmp_path: Path) -> None:
    (tmp_path / "metrics.yaml").write_text(
        "model_metrics:\n"
        "  gauge:\n"
        "    - {name: RequestBatchSize, unit: count, dimensions: [ModelName]}\n"
        "  counter:\n"
        "    - {name: InferenceRequestCount, unit: count, dimensions: []}\n",
        encoding="utf-8",
    )
    declared = read_metrics_yaml(tmp_path / "metrics.yaml")
    store = MetricStore()
    metrics = TorchServeMetrics(store, "m", declared.model_metrics)
    metrics.get_metric("RequestBatchSize", MetricTypes.GAUGE).add_or_update(4, ["m"])
    metrics.get_metric("InferenceRequestCount").add_or_update(1, [])
    found = recorded(store)
    assert found["RequestBatchSize"] == (Kind.GAUGE, ("ModelName",), {("m",): 4.0})
    assert found["InferenceRequestCount"] == (Kind.COUNTER, (), {(): 1.0})
    # a declared name asked for as another type is not there, as in TorchServe
    with pytest.raises(KeyError):
        metrics.get_metric("RequestBatchSize", MetricTypes.COUNTER)


def test_torchserves_default_file_declares_handler_and_prediction_time() -> None:
    metrics = TorchServeMetrics(MetricStore(), "m", read_metrics_yaml(None).model_metrics)
    for name in ("HandlerTime", "PredictionTime"):
        found = metrics.get_metric(name, MetricTypes.GAUGE)
        assert found.unit == "ms" and found.dimension_names == ["ModelName", "Level"]
    assert len(TORCHSERVE_DEFAULT.ts_metrics) == 19


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("model_metrics:\n  gauge:\n    - {name: X, unit: ms}\n", r"gauge\[0\]' has no dimensions"),
        ("model_metrics:\n  summary: []\n", "'model_metrics.summary' is not a metric type"),
        ("model_metrics:\n  gauge:\n    - {name: X, unit: ms, dimensions: a}\n", "list of names"),
        ("- a\n", "must be a mapping"),
        ("a: [\n", "invalid YAML"),
    ],
)
def test_a_wrong_metrics_yaml_is_refused_naming_the_entry(
    tmp_path: Path, text: str, problem: str
) -> None:
    path = tmp_path / "metrics.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DefinitionError, match=problem):
        read_metrics_yaml(path)
    with pytest.raises(DefinitionError, match="cannot be read"):
        read_metrics_yaml(tmp_path / "missing.yaml")


def test_log_mode_writes_torchserves_model_metrics_line(caplog: pytest.LogCaptureFixture) -> None:
    metrics = TorchServeMetrics(MetricStore(), "m", mode="log")
    with caplog.at_level(logging.INFO, logger="podium.torchserve.model_metrics"):
        metrics.add_time("HandlerTime", 12.5, None, "ms")
    [line] = [r.getMessage() for r in caplog.records if r.name.endswith("model_metrics")]
    assert re.fullmatch(
        r"HandlerTime\.ms:12\.5\|#ModelName:m,Level:Model\|#hostname:\S+,requestID:,timestamp:\d+",
        line,
    )


def test_prometheus_mode_adds_the_hostname_label_and_torchserves_help() -> None:
    store = MetricStore()
    metrics = TorchServeMetrics(store, "m", mode="prometheus")
    metrics.add_counter("Handled", 2)
    family, series = next((f, dict(s)) for f, s in store.collect() if f.name == "Handled")
    assert family.labelnames == (*DEFAULTS, "Hostname")
    assert series == {("m", "Model", socket.gethostname()): 2.0}
    assert family.documentation == "Torchserve prometheus counter metric with unit: count"


def test_a_context_built_without_metrics_takes_every_call_and_records_nowhere() -> None:
    # as a handler's own unit test builds ts.context.Context: TorchServe's six arguments
    from podium.model.torchserve import Context

    metrics = Context("m", "/tmp", {}, 1, None, "0.12.0").metrics
    metrics.add_counter("Handled", 2)
    metrics.add_time("HandlerTime", 12.5)
    metrics.get_metric("HandlerTime", MetricTypes.GAUGE).add_or_update(1.0, ["m", "Model"])
    metrics.add_metric_to_cache("Rows", "count", ["kind"]).add_or_update(3, ["a"])
    assert metrics.get_metric("Rows").dimension_names == ["kind"]
