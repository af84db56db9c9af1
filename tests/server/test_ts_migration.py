"""Issue 22's TorchServe items, end to end on a real `podium serve` with httpx and grpcio:
/explanations, unary gRPC Predictions of a handler that sends intermediate responses, and
metrics.yaml / metrics_mode (the handler's declared metrics, TorchServe's names on /metrics,
TorchServe's log lines)."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import grpc
import httpx
import pytest
from conftest import TEST_MODELS, Server, run_server
from e2e_helpers import PATIENCE
from grpc_helpers import target

pytest_plugins = ["grpc_fixtures"]

TS_MODELS = TEST_MODELS / "torchserve"
METERED = TS_MODELS / "metered"


def _archive(name: str, store: Path, handler: str | None = None) -> Path:
    src = TS_MODELS / (handler or name)
    cmd = [sys.executable, "-m", "podium", "archive", "--model-name", name,
           "--version", "1.0", "--handler", str(src / "handler.py"),
           "--export-path", str(store)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return store / f"{name}.mar"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """explainer, streamer and metered, with TorchServe's names on /metrics and the example's
    metrics.yaml, as config.properties gives them (metrics_mode, metrics_config)."""
    where = tmp_path_factory.mktemp("ts-migration")
    store = where / "store"
    store.mkdir()
    mars = [_archive(name, store) for name in ("explainer", "streamer", "metered")]
    _archive("registered", store, handler="metered")  # registered later, by the management API
    shutil.copy(METERED / "metrics.yaml", where / "metrics.yaml")
    shutil.copy(METERED / "config.properties", where / "config.properties")
    args = ("--ts-config", str(where / "config.properties"), "--model-store", str(store))
    with run_server(*mars, args=args, cwd=where) as running:
        yield running


def _metrics(server: Server) -> str:
    return httpx.get(f"{server.addresses['http-metrics']}/metrics", timeout=PATIENCE).text


def _sample(text: str, name: str, **labels: str) -> float | None:
    """The value of the sample ``name`` whose labels include ``labels``."""
    for line in text.splitlines():
        found = re.match(rf"^{re.escape(name)}(\{{(.*)\}})? (\S+)$", line)
        if found is None:
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', found.group(2) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            return float(found.group(3))
    return None


# -- /explanations ------------------------------------------------------------------------------


def test_explanations_call_explain_handle_and_predictions_do_not(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=PATIENCE) as client:
        predicted = client.post("/predictions/explainer", json={"x": 3, "target": 1})
        explained = client.post("/explanations/explainer", json={"x": 3, "target": 1})
        versioned = client.post("/explanations/explainer/1.0", json={"x": 4})
        unknown = client.post("/explanations/nope", json={"x": 1})
        wrong_version = client.post("/explanations/explainer/9.9", json={"x": 1})
    assert predicted.status_code == 200 and predicted.json() == {"y": 6.0}
    assert explained.status_code == 200
    assert explained.json() == {"x": 3.0, "attribution": 1.0, "target": 1}
    assert versioned.status_code == 200 and versioned.json()["x"] == 4.0
    # errors in TorchServe's shape, as under /predictions
    assert unknown.status_code == 404 and unknown.json()["type"] == "ModelNotFoundException"
    assert wrong_version.status_code == 404
    assert wrong_version.json()["type"] == "ModelVersionNotFoundException"


def test_an_explanation_of_a_handler_without_explain_handle_is_a_500(server: Server) -> None:
    # metered has the steps but no explain_handle: a model's failure, named
    r = httpx.post(f"{server.url}/explanations/metered", json={"a": 1}, timeout=PATIENCE)
    assert r.status_code == 500
    assert r.json()["type"] == "InternalServerException"
    assert "explain_handle" in r.json()["message"]


# -- intermediate responses -------------------------------------------------------------------


def test_unary_grpc_predictions_answers_the_first_intermediate_item(
    server: Server, ts: SimpleNamespace
) -> None:
    body = json.dumps({"text": "one two three"}).encode()
    with grpc.insecure_channel(target(server)) as channel:
        stub = ts.grpc.InferenceAPIsServiceStub(channel)
        request = ts.pb2.PredictionsRequest(model_name="streamer", input={"body": body})
        unary = stub.Predictions(request, timeout=PATIENCE)
        streamed = [r.prediction for r in stub.StreamPredictions(request, timeout=PATIENCE)]
        again = stub.Predictions(request, timeout=PATIENCE)
    # TorchServe 0.12 completes a unary call at the handler's first response
    assert unary.prediction == b"one " and again.prediction == b"one "
    assert streamed == [b"one ", b"two ", b"three"]


def test_rest_predictions_of_an_intermediate_handler_sends_every_chunk(server: Server) -> None:
    r = httpx.post(
        f"{server.url}/predictions/streamer", json={"text": "one two three"}, timeout=PATIENCE
    )
    assert r.status_code == 200 and r.text == "one two three"
    assert r.headers["transfer-encoding"] == "chunked"


# -- metrics.yaml and metrics_mode ----------------------------------------------------------


def test_declared_metrics_exist_for_the_handler(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=PATIENCE) as client:
        for _ in range(3):
            r = client.post("/predictions/metered", json={"a": 1})
            assert r.status_code == 200, r.text  # get_metric("RequestBatchSize") found it
            assert r.json() == {"echo": {"a": 1}}
    text = _metrics(server)
    assert _sample(text, "RequestBatchSize", model="metered", ModelName="metered") == 1.0
    # as TorchServe's frontend writes a handler's metrics (metrics_mode=prometheus): a counter
    # under its own name, and the Hostname label (the explanation test ran preprocess once more)
    host = {"Hostname": socket.gethostname()}
    assert (_sample(text, "InferenceRequestCount", model="metered", **host) or 0) >= 3.0
    assert (_sample(text, "PreprocessCallCount", ModelName="metered") or 0) >= 3.0
    assert _sample(text, "InitializeCallCount", Level="Model", **host) == 1.0
    assert "# TYPE InferenceRequestCount untyped" in text
    assert "InferenceRequestCount_total" not in text
    assert _sample(text, "HandlerMethodTime", MethodName="preprocess") == 1.5
    # TorchServe's backend records PredictionTime after every handle call
    assert _sample(text, "PredictionTime", ModelName="metered", Level="Model") is not None


def test_a_model_registered_later_reads_the_servers_metrics_yaml_and_mode(server: Server) -> None:
    registered = httpx.post(
        f"{server.management_url}/models",
        params={"url": "registered.mar", "initial_workers": "1", "synchronous": "true"},
        timeout=PATIENCE,
    )
    assert registered.status_code == 200, registered.text
    r = httpx.post(f"{server.url}/predictions/registered", json={"a": 1}, timeout=PATIENCE)
    assert r.status_code == 200, r.text  # RequestBatchSize is declared for it too
    text = _metrics(server)
    host = socket.gethostname()
    assert _sample(text, "RequestBatchSize", model="registered", Hostname=host) == 1.0
    assert _sample(text, "InferenceRequestCount", model="registered", Hostname=host) == 1.0


def test_torchserve_frontend_names_on_metrics(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=PATIENCE) as client:
        before = _metrics(server)
        ok = [client.post("/predictions/explainer", json={"x": i}) for i in range(4)]
        bad = client.post(
            "/predictions/explainer",
            content=b"{not json",
            headers={"content-type": "application/json"},
        )
    assert all(r.status_code == 200 for r in ok) and bad.status_code == 400
    text = _metrics(server)

    def grew(name: str, **labels: str) -> float:
        return (_sample(text, name, **labels) or 0.0) - (_sample(before, name, **labels) or 0.0)

    assert grew("ts_inference_requests_total", model_name="explainer", model_version="1.0") == 5
    assert grew("ts_inference_latency_microseconds", model_name="explainer") > 0
    assert _sample(text, "ts_queue_latency_microseconds", model_name="explainer") is not None
    assert grew("Requests2XX", Level="Host") == 4
    assert grew("Requests4XX", Level="Host") == 1
    # TorchServe's names and help; no _total added, as TorchServe's Prometheus client writes
    assert "# TYPE Requests2XX untyped" in text
    assert "# HELP QueueTime Torchserve prometheus gauge metric with unit: Milliseconds" in text
    assert _sample(text, "QueueTime", Level="Host") is not None
    assert _sample(text, "WorkerLoadTime", WorkerName="W-explainer_1.0") is not None
    assert _sample(text, "MemoryUsed", Level="Host") is not None
    # and Podium's own names beside them
    assert _sample(text, "podium_requests_total", model="explainer") is not None


def test_metrics_mode_log_writes_torchserve_lines(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    mar = _archive("metered", store)
    (tmp_path / "config.properties").write_text(
        f"metrics_mode=log\nmetrics_config={METERED / 'metrics.yaml'}\n"
    )
    args = ("--ts-config", str(tmp_path / "config.properties"))
    with run_server(mar, args=args) as running:
        r = httpx.post(f"{running.url}/predictions/metered", json={"a": 1}, timeout=PATIENCE)
        assert r.status_code == 200, r.text
        text = _metrics(running)
    log = running.log  # the frontend's lines of the last interval are written as it stops
    # TorchServe's model_metrics.log line: Name.Unit:value|#dims|#hostname:...,requestID:...
    assert re.search(r"RequestBatchSize\.count:1\.0\|#ModelName:metered\|#hostname:", log), log
    assert re.search(r"PredictionTime\.ms:[0-9.]+\|#ModelName:metered,Level:Model\|", log)
    # and its ts_metrics.log lines: one request, one 2XX answer
    assert re.search(r"Requests2XX\.Count:1\.0\|#Level:Host\|#hostname:\S+,timestamp:\d+", log)
    assert re.search(
        r"ts_inference_requests_total\.Count:1\.0\|#model_name:metered,model_version:1\.0\|",
        log,
    )
    assert "Requests4XX" not in log  # nothing changed: no line
    # log mode: TorchServe's frontend names are not on /metrics, Podium's are
    assert _sample(text, "Requests2XX") is None
    assert _sample(text, "podium_requests_total", model="metered") is not None


def test_a_wrong_metrics_yaml_stops_the_start(tmp_path: Path) -> None:
    (tmp_path / "metrics.yaml").write_text("model_metrics:\n  gauge:\n    - name: X\n")
    with (
        pytest.raises(RuntimeError, match=r"metrics.yaml.*'model_metrics.gauge\[0\]' has no "),
        run_server(TS_MODELS / "echo", args=("--metrics-config", str(tmp_path / "metrics.yaml"))),
    ):
        pass


# -- workflows: not served (docs/migrating.md, "Workflows") -----------------------------------


def test_workflow_routes_are_not_served(server: Server) -> None:
    predicted = httpx.post(f"{server.url}/wfpredict/wf", json={"a": 1}, timeout=PATIENCE)
    listed = httpx.get(f"{server.management_url}/workflows", timeout=PATIENCE)
    registered = httpx.post(
        f"{server.management_url}/workflows", params={"url": "wf.war"}, timeout=PATIENCE
    )
    assert (predicted.status_code, listed.status_code, registered.status_code) == (404, 404, 404)


def test_declared_metrics_in_a_worker_process(tmp_path: Path) -> None:
    """A handler in a worker process finds the server's metrics.yaml too (its model keys go with
    it), and what it records reaches /metrics in TorchServe's form."""
    (tmp_path / "model-config.yaml").write_text("podium:\n  workers: process\n")
    cmd = [sys.executable, "-m", "podium", "archive", "--model-name", "metered",
           "--version", "1.0", "--handler", str(METERED / "handler.py"),
           "--config-file", str(tmp_path / "model-config.yaml"),
           "--export-path", str(tmp_path)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    args = ("--ts-metrics", "prometheus", "--metrics-config", str(METERED / "metrics.yaml"))
    with run_server(tmp_path / "metered.mar", args=args) as running:
        r = httpx.post(f"{running.url}/predictions/metered", json={"a": 1}, timeout=PATIENCE)
        assert r.status_code == 200, r.text
        text = _metrics(running)
    assert "process worker" in running.log
    host = socket.gethostname()
    assert _sample(text, "RequestBatchSize", model="metered", Hostname=host) == 1.0
    assert _sample(text, "InferenceRequestCount", model="metered", Hostname=host) == 1.0
