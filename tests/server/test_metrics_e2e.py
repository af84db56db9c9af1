"""Prometheus metrics and the statistics extension, end to end: a real server, real traffic on
every protocol, then ``/metrics`` parsed with prometheus-client's own parser and the statistics
read with tritonclient (REST and gRPC), counted against the requests sent.

One server serves every model of tests/models/metrics (thread and process workers, batching,
sequences, a stream, a TorchServe handler and an MLServer runtime recording their own metrics);
each test counts the difference its own traffic made.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import numpy as np
import pytest
from conftest import EXAMPLES, TEST_MODELS, Server, run_server
from prometheus_client.parser import text_string_to_metric_families

from podium.model.torchserve import archive_model

MODELS = TEST_MODELS / "metrics"
PATIENCE = 20.0

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    store = tmp_path_factory.mktemp("metrics-ts")
    ts = archive_model(
        model_name="ts",
        handler=MODELS / "ts" / "handler.py",
        export_path=store,
        version="1.0",
        archive_format="no-archive",
    )
    names = ("plain", "proc", "batched", "seq", "stream", "mls")
    with run_server(*(MODELS / n for n in names), ts, timeout=120) as server:
        yield server


def metrics_text(server: Server, accept: str | None = None) -> httpx.Response:
    headers = {"accept": accept} if accept else {}
    response = httpx.get(server.addresses["http-metrics"] + "/metrics", headers=headers)
    assert response.status_code == 200, response.text
    return response


def scrape(server: Server) -> Samples:
    """Every sample of ``/metrics``, by name and labels (parsed by prometheus-client)."""
    found: Samples = {}
    for family in text_string_to_metric_families(metrics_text(server).text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample ``name`` with exactly ``labels`` (0 when there is none)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def eventually(server: Server, check: Callable[[Samples], bool]) -> Samples:
    """Scrape until ``check`` holds (what a worker process reports comes within a second)."""
    deadline = time.monotonic() + PATIENCE
    while True:
        samples = scrape(server)
        if check(samples):
            return samples
        if time.monotonic() > deadline:
            raise AssertionError("the metrics never showed what was expected")
        time.sleep(0.05)


def truss(server: Server, model: str, body: Any, **kwargs: Any) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/models/{model}:predict", json=body, **kwargs)


def oip_bytes(name: str, text: str) -> dict[str, Any]:
    return {"name": name, "datatype": "BYTES", "shape": [1], "data": [text]}


# -- requests ------------------------------------------------------------------------------------


def test_requests_are_counted_by_protocol_outcome_and_code(server: Server) -> None:
    import tritonclient.grpc as grpcclient

    plain = {"model": "plain", "version": "1"}
    before = scrape(server)
    for _ in range(3):
        assert truss(server, "plain", {"kind": "ok"}).status_code == 200
    for _ in range(2):
        r = httpx.post(f"{server.url}/predictions/plain", json={"kind": "ok"})
        assert r.status_code == 200, r.text
    r = httpx.post(
        f"{server.url}/v2/models/plain/infer", json={"inputs": [oip_bytes("kind", "ok")]}
    )
    assert r.status_code == 200, r.text
    assert truss(server, "plain", {"kind": "fail"}).status_code == 500
    r = httpx.post(
        f"{server.url}/v1/models/plain:predict",
        content=b'{"kind": ',
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 400
    client = grpcclient.InferenceServerClient(server.addresses["grpc-inference"])
    kind = grpcclient.InferInput("kind", [1], "BYTES")
    kind.set_data_from_numpy(np.array([b"ok"], dtype=object))
    client.infer("plain", [kind])
    kind.set_data_from_numpy(np.array([b"fail"], dtype=object))
    with pytest.raises(Exception, match="asked to fail"):
        client.infer("plain", [kind])
    after = scrape(server)

    def requests(protocol: str, outcome: str, code: str) -> float:
        return delta(
            before,
            after,
            "podium_requests_total",
            **plain,
            protocol=protocol,
            outcome=outcome,
            code=code,
        )

    assert requests("truss", "success", "200") == 3
    assert requests("torchserve_rest", "success", "200") == 2
    assert requests("oip_rest", "success", "200") == 1
    assert requests("oip_grpc", "success", "OK") == 1
    assert requests("truss", "server_error", "500") == 1
    assert requests("oip_grpc", "server_error", "INTERNAL") == 1
    assert requests("truss", "client_error", "400") == 1  # the body did not parse
    # The durations count the requests that reached the model (not the one refused).
    duration = "podium_request_duration_seconds_count"
    assert delta(before, after, duration, **plain, protocol="truss") == 4
    assert delta(before, after, duration, **plain, protocol="oip_grpc") == 2
    bucket = "podium_request_duration_seconds_bucket"
    assert delta(before, after, bucket, **plain, protocol="truss", le="+Inf") == 4
    assert delta(before, after, "podium_predict_duration_seconds_count", **plain) == 7
    assert delta(before, after, "podium_queue_duration_seconds_count", **plain) == 9
    # The model's own metrics, made at import, in __init__ and in load(), with its labels.
    assert value(after, "plain_imports_total", **plain) == 1
    assert value(after, "plain_instances", **plain) == 1
    assert delta(before, after, "plain_calls_total", **plain, kind="ok") == 7
    assert delta(before, after, "plain_calls_total", **plain, kind="fail") == 2
    assert delta(before, after, "plain_sizes_count", **plain) == 9
    assert value(after, "plain_sizes_bucket", **plain, le="1.0") >= 9
    assert value(after, "podium_requests_in_flight", **plain) == 0
    assert value(after, "podium_model_ready", **plain) == 1
    assert value(after, "podium_workers", **plain, state="ready") == 1
    assert value(after, "podium_predict_slots", **plain) == 1
    assert value(after, "podium_model_load_seconds", **plain) > 0


def test_a_client_that_leaves_is_counted_as_cancelled(server: Server) -> None:
    labels = {"model": "plain", "version": "1", "protocol": "truss"}
    before = scrape(server)
    with pytest.raises(httpx.TimeoutException):
        truss(server, "plain", {"kind": "slow", "sleep": 30}, timeout=0.5)
    eventually(
        server,
        lambda now: (
            delta(before, now, "podium_requests_total", **labels, outcome="cancelled", code="499")
            == 1
        ),
    )


def test_a_batch_is_counted_once_with_its_size(server: Server) -> None:
    labels = {"model": "batched", "version": "1"}
    before = scrape(server)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda x: truss(server, "batched", {"x": x}), range(4)))
    assert [a.json()["batch"] for a in answers] == [4, 4, 4, 4]
    after = scrape(server)
    assert delta(before, after, "podium_batches_total", **labels) == 1
    assert delta(before, after, "podium_batch_size_count", **labels) == 1
    assert delta(before, after, "podium_batch_size_sum", **labels) == 4
    assert delta(before, after, "podium_batch_size_bucket", **labels, le="2") == 0
    assert delta(before, after, "podium_batch_size_bucket", **labels, le="4") == 1
    assert delta(before, after, "podium_queue_duration_seconds_count", **labels) == 4
    assert delta(before, after, "podium_predict_duration_seconds_count", **labels) == 1
    ok = {"protocol": "truss", "outcome": "success", "code": "200"}
    assert delta(before, after, "podium_requests_total", **labels, **ok) == 4


def test_sequences_are_counted_open_and_ended_by_reason(server: Server) -> None:
    labels = {"model": "seq", "version": "1"}

    def send(sid: str, body: dict[str, int], **headers: str) -> httpx.Response:
        r = httpx.post(
            f"{server.url}/predictions/seq",
            json=body,
            headers={"ts_request_sequence_id": sid, **headers},
        )
        assert r.status_code == 200, r.text
        return r

    before = scrape(server)
    send("m-1", {"add": 1})
    assert send("m-1", {"add": 2}, ts_request_sequence_id_end="true").json()["total"] == 3
    send("m-2", {"add": 1, "finish": 1})
    send("m-3", {"add": 5})
    after = scrape(server)
    ended = "podium_sequences_ended_total"
    assert delta(before, after, ended, **labels, reason="request") == 1
    assert delta(before, after, ended, **labels, reason="model") == 1
    assert value(after, "podium_sequences_open", **labels) >= 1
    send("m-3", {"add": 1}, ts_request_sequence_id_end="true")
    assert value(scrape(server), "podium_sequences_open", **labels) == (
        value(after, "podium_sequences_open", **labels) - 1
    )


def test_a_stream_counts_its_items_and_its_first_item(server: Server) -> None:
    labels = {"model": "stream", "version": "1"}
    before = scrape(server)
    with httpx.stream("POST", f"{server.url}/v1/models/stream:predict", json={"n": 5}) as response:
        assert response.status_code == 200
        assert len([line for line in response.iter_lines() if line]) == 5
    after = scrape(server)
    assert delta(before, after, "podium_stream_items_total", **labels) == 5
    assert delta(before, after, "podium_stream_first_item_seconds_count", **labels) == 1
    assert value(after, "podium_streams_open", **labels) == 0
    ok = {"protocol": "truss", "outcome": "success", "code": "200"}
    assert delta(before, after, "podium_requests_total", **labels, **ok) == 1


def test_a_process_worker_reports_and_its_counts_survive_a_restart(server: Server) -> None:
    labels = {"model": "proc", "version": "1"}
    before = scrape(server)
    for _ in range(3):
        assert truss(server, "proc", {}).status_code == 200
    # The model's own metrics come with the answers; the worker's counters within a second.
    now = scrape(server)
    assert delta(before, now, "proc_calls_total", **labels) == 3
    assert value(now, "proc_pid", **labels) > 0
    eventually(
        server,
        lambda s: (
            delta(before, s, "podium_preprocess_duration_seconds_count", **labels) == 3
            and delta(before, s, "podium_predict_duration_seconds_count", **labels) == 3
            and delta(before, s, "podium_postprocess_duration_seconds_count", **labels) == 3
        ),
    )
    crashed = truss(server, "proc", {"crash": 1})
    assert crashed.status_code == 500
    restarted = eventually(
        server,
        lambda s: (
            delta(before, s, "podium_worker_restarts_total", **labels, reason="crashed") == 1
            and value(s, "podium_workers", **labels, state="ready") == 1
        ),
    )
    ok = {"protocol": "truss", "outcome": "success", "code": "200"}
    died = {"protocol": "truss", "outcome": "worker_died", "code": "500"}
    assert delta(before, restarted, "podium_requests_total", **labels, **died) == 1
    for _ in range(2):
        assert truss(server, "proc", {}).status_code == 200
    after = eventually(
        server, lambda s: delta(before, s, "podium_predict_duration_seconds_count", **labels) == 5
    )
    # Counted across both worker processes: a restart does not reset them (the crashed
    # request's own increment died with its process).
    assert delta(before, after, "proc_calls_total", **labels) == 5
    assert delta(before, after, "podium_requests_total", **labels, **ok) == 5


# -- the models' own metrics, through TorchServe's and MLServer's APIs ----------------------------


def test_a_torchserve_handler_records_through_context_metrics(server: Server) -> None:
    before = scrape(server)
    for _ in range(2):
        r = httpx.post(f"{server.url}/predictions/ts", json={"q": 1})
        assert r.status_code == 200, r.text
    after = scrape(server)
    labels = {"model": "ts", "version": "1.0", "ModelName": "ts", "Level": "Model"}
    assert delta(before, after, "TsHandled_total", **labels, kind="rows") == 2
    assert value(after, "TsHandlerTime", **labels) == 12.5
    assert value(after, "TsPayloadSize", **labels) == 0.25
    assert value(after, "TsLoad", **labels) == 40.0
    assert delta(before, after, "TsRows_count", **labels) == 2
    assert delta(before, after, "TsRows_sum", **labels) == 2
    cached = {"model": "ts", "version": "1.0", "route": "predictions"}
    assert delta(before, after, "TsCached_total", **cached) == 2


def test_an_mlserver_runtime_records_through_register_and_log(server: Server) -> None:
    labels = {"model": "mls", "version": "1"}
    before = scrape(server)
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [3], "data": [1, 2, 3]}]}
    r = httpx.post(f"{server.url}/v2/models/mls/infer", json=body)
    assert r.status_code == 200, r.text
    after = scrape(server)
    assert delta(before, after, "mls_rows_count", **labels) == 1
    assert delta(before, after, "mls_rows_sum", **labels) == 3
    assert delta(before, after, "mls_unregistered_count", **labels) == 1
    assert delta(before, after, "mls_unregistered_sum", **labels) == 2


# -- the statistics extension --------------------------------------------------------------------


def test_statistics_over_rest_and_grpc_agree_with_the_metrics(server: Server) -> None:
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda x: truss(server, "batched", {"x": x}), range(4)))
    http = httpclient.InferenceServerClient(server.url.removeprefix("http://"))
    grpc = grpcclient.InferenceServerClient(server.addresses["grpc-inference"])
    over_http = http.get_inference_statistics("batched")["model_stats"]
    over_grpc = grpc.get_inference_statistics("batched", as_json=True)["model_stats"]
    assert len(over_http) == len(over_grpc) == 1
    stats = over_http[0]
    assert (stats["name"], stats["version"]) == ("batched", "1")
    samples = scrape(server)
    labels = {"model": "batched", "version": "1"}
    succeeded = sum(
        v
        for (name, found), v in samples.items()
        if name == "podium_requests_total"
        and ("model", "batched") in found
        and ("outcome", "success") in found
    )
    infer = stats["inference_stats"]
    assert infer["success"]["count"] == succeeded
    assert infer["success"]["ns"] > 0
    assert infer["queue"]["count"] == value(
        samples, "podium_queue_duration_seconds_count", **labels
    )
    assert infer["compute_infer"]["count"] == succeeded  # each request of each batch
    assert stats["execution_count"] == value(samples, "podium_batches_total", **labels)
    assert stats["inference_count"] == succeeded
    assert stats["last_inference"] > 0
    assert {b["batch_size"]: b["compute_infer"]["count"] for b in stats["batch_stats"]} == {
        4: stats["execution_count"]
    }
    # The same numbers over gRPC (its JSON writes uint64 as strings and leaves zeros out).
    grpc_infer = over_grpc[0]["inference_stats"]
    assert int(grpc_infer["success"]["count"]) == infer["success"]["count"]
    assert int(over_grpc[0]["execution_count"]) == stats["execution_count"]
    # Every model, one version, and an unknown model.
    names = {s["name"] for s in http.get_inference_statistics()["model_stats"]}
    assert {"plain", "proc", "batched", "seq", "stream", "mls", "ts"} <= names
    assert http.get_inference_statistics("batched", "1")["model_stats"][0]["version"] == "1"
    every = grpc.get_inference_statistics(as_json=True)["model_stats"]
    assert {s["name"] for s in every} == names
    with pytest.raises(Exception, match="is not found"):
        http.get_inference_statistics("nope")
    with pytest.raises(Exception, match="is not found"):
        grpc.get_inference_statistics("nope")


# -- the listener --------------------------------------------------------------------------------


def test_the_listener_serves_prometheus_text_and_openmetrics(server: Server) -> None:
    import grpc

    text = metrics_text(server)
    assert text.headers["content-type"].startswith("text/plain; version=0.0.4")
    names = {family.name for family in text_string_to_metric_families(text.text)}
    assert {"podium_build_info", "process_cpu_seconds", "process_resident_memory_bytes"} <= names
    samples = scrape(server)
    assert value(samples, "podium_build_info", version="0.1.0") == 1
    assert value(samples, "podium_http_connections_open", listener="http-metrics") >= 1
    with grpc.insecure_channel(server.addresses["grpc-inference"]) as channel:
        grpc.channel_ready_future(channel).result(timeout=PATIENCE)
        samples = scrape(server)
        assert value(samples, "podium_grpc_connections_open", listener="grpc-inference") >= 1
    openmetrics = metrics_text(server, "application/openmetrics-text; version=1.0.0")
    assert openmetrics.headers["content-type"].startswith("application/openmetrics-text")
    assert openmetrics.text.endswith("# EOF\n")
    base = server.addresses["http-metrics"]
    assert httpx.get(base + "/").status_code == 404
    refused = httpx.post(base + "/metrics")
    assert refused.status_code == 405 and refused.headers["allow"] == "GET, HEAD"


def test_no_metrics_serves_no_metrics_listener() -> None:
    with run_server(EXAMPLES / "echo", args=("--no-metrics",)) as server:
        assert "http-metrics" not in server.addresses
        assert set(server.addresses) >= {"http-inference", "grpc-inference"}


def test_the_metrics_host_is_loopback_by_default(server: Server) -> None:
    assert server.addresses["http-metrics"].startswith("http://127.0.0.1:")
