"""Access lines, JSON lines and request ids, end to end (docs/operations.md, "Logs").

A real ``podium serve --log-format json`` serves the models of tests/models/logs (each logs a line
with Python's ``logging`` while it serves, and answers the request id it was given) and an
MLServer runtime; every protocol is called with a client id and without one, and the test reads
what the server logged: the id goes in (header, metadata, OIP ``id``), comes back (header,
trailing metadata), reaches the model (``podium.request_id()``, TorchServe's
``context.get_request_id``, MLServer's ``payload.id``) and names the model's own log lines and the
request's one access line.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import grpc
import httpx
import pytest
from conftest import TEST_MODELS, Server, run_server
from grpc_helpers import Stubs, infer_request, target

pytest_plugins = ["grpc_fixtures"]

LOG_MODELS = TEST_MODELS / "logs"
PROBE = TEST_MODELS / "mlserver" / "probe"
MADE = re.compile(r"[0-9a-f]{12}-[0-9a-f]+")  # an id the server made (RequestIds)
ACCESS_KEYS = {
    "ts",
    "level",
    "logger",
    "message",
    "request_id",
    "protocol",
    "route",
    "method",
    "path",
    "status",
    "code",
    "duration_ms",
    "bytes_in",
    "bytes_out",
    "model",
    "version",
    "peer",
}
BODY = {"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1.0]}]}


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with run_server(LOG_MODELS, PROBE, args=("--log-format", "json")) as running:
        yield running


def records(server: Server) -> list[dict[str, Any]]:
    """Every line the server logged so far, each a JSON object (the test fails on any other)."""
    found = []
    for line in list(server.lines):
        assert line.startswith("{"), f"not a JSON line: {line!r}"
        found.append(json.loads(line))
    return found


def about(server: Server, request_id: str, *, lines: int = 2, timeout: float = 10.0) -> list[dict]:
    """The lines about ``request_id``, once there are ``lines`` of them (the access line is
    written when the request has ended, so it may come just after the response)."""
    deadline = time.monotonic() + timeout
    while True:
        found = [r for r in records(server) if r.get("request_id") == request_id]
        if len(found) >= lines or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


def access_of(found: list[dict]) -> dict:
    (line,) = [r for r in found if r["logger"] == "podium.access"]
    assert set(line) == ACCESS_KEYS
    return line


def model_line(found: list[dict], logger: str) -> dict:
    (line,) = [r for r in found if r["logger"] == logger]
    return line


# -- HTTP ------------------------------------------------------------------------------------


def test_an_oip_rest_request_with_an_id_is_named_by_it_everywhere(server: Server) -> None:
    response = httpx.post(
        f"{server.url}/v2/models/tell/infer", json=BODY, headers={"X-Request-ID": "client-1"}
    )
    assert response.status_code == 200
    assert response.headers["x-request-id"] == "client-1"
    assert response.json()["outputs"][0]["data"] == ["client-1"]  # podium.request_id()
    found = about(server, "client-1")
    assert model_line(found, "models.tell")["message"] == "predicting in tell"
    access = access_of(found)
    assert access["level"] == "INFO"
    assert access["protocol"] == "oip_rest"
    assert access["route"] == "modelInfer"
    assert (access["method"], access["path"]) == ("POST", "/v2/models/tell/infer")
    assert (access["model"], access["version"]) == ("tell", None)
    assert (access["status"], access["code"]) == (200, None)
    assert access["bytes_in"] == len(response.request.content)
    assert access["bytes_out"] == len(response.content)
    assert access["duration_ms"] > 0
    assert re.fullmatch(r"127\.0\.0\.1:\d+", access["peer"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", access["ts"])


def test_a_trusted_proxy_names_the_client_in_the_line(server: Server) -> None:
    # uvicorn trusts 127.0.0.1 by default (FORWARDED_ALLOW_IPS); Podium reads the headers
    headers = {"X-Request-ID": "proxied-1", "X-Forwarded-For": "203.0.113.7, 127.0.0.1"}
    response = httpx.post(f"{server.url}/v2/models/tell/infer", json=BODY, headers=headers)
    assert response.status_code == 200
    assert access_of(about(server, "proxied-1"))["peer"] == "203.0.113.7:0"


def test_a_request_without_an_id_gets_one_made_by_the_server(server: Server) -> None:
    response = httpx.post(f"{server.url}/v2/models/tell/infer", json=BODY)
    made = response.headers["x-request-id"]
    assert MADE.fullmatch(made)
    assert response.json()["outputs"][0]["data"] == [made]
    assert "id" not in response.json()  # no id is invented in an OIP body
    found = about(server, made)
    assert access_of(found)["status"] == 200
    assert model_line(found, "models.tell")["request_id"] == made


def test_the_oip_id_names_a_request_that_has_no_header(server: Server) -> None:
    response = httpx.post(f"{server.url}/v2/models/tell/infer", json={**BODY, "id": "oip-7"})
    assert response.headers["x-request-id"] == "oip-7"
    assert response.json()["id"] == "oip-7"
    assert access_of(about(server, "oip-7"))["status"] == 200
    # the header wins over the body's id
    response = httpx.post(
        f"{server.url}/v2/models/tell/infer",
        json={**BODY, "id": "oip-8"},
        headers={"X-Request-ID": "header-8"},
    )
    assert response.headers["x-request-id"] == "header-8"
    assert response.json()["id"] == "oip-8"


@pytest.mark.parametrize("sent", ['bad id"', "x" * 129, "é"])
def test_a_client_id_that_is_too_long_or_odd_is_never_echoed(server: Server, sent: str) -> None:
    response = httpx.post(
        f"{server.url}/v2/models/tell/infer",
        json={**BODY, "id": sent},
        headers={"X-Request-ID": sent.encode("utf-8")},
    )
    made = response.headers["x-request-id"]
    assert MADE.fullmatch(made)
    assert sent not in json.dumps(about(server, made))


def test_truss_and_torchserve_rest_requests(server: Server) -> None:
    response = httpx.post(
        f"{server.url}/v1/models/tell:predict", json={"a": 1}, headers={"X-Request-ID": "truss-1"}
    )
    assert response.json() == {"request_id": ["truss-1"]}
    found = about(server, "truss-1")
    assert access_of(found)["protocol"] == "truss"
    assert access_of(found)["route"] == "trussPredict"
    assert model_line(found, "models.tell")
    response = httpx.post(
        f"{server.url}/predictions/ts-tell", content=b"hi", headers={"X-Request-ID": "ts-1"}
    )
    assert response.json() == {"request_id": "ts-1"}  # context.get_request_id(0)
    found = about(server, "ts-1")
    access = access_of(found)
    assert (access["protocol"], access["route"]) == ("torchserve_rest", "predictions")
    assert (access["model"], access["version"]) == ("ts-tell", "1.0")
    assert model_line(found, "models.ts_tell")["message"] == "handling 1 request(s)"


def test_an_mlserver_runtime_gets_the_id_as_its_payload_id(server: Server) -> None:
    body = {"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["hi"]}]}
    response = httpx.post(
        f"{server.url}/v2/models/mls-probe/infer", json=body, headers={"X-Request-ID": "mls-1"}
    )
    info = json.loads(response.json()["outputs"][1]["data"][0])
    assert info["id"] == "mls-1"
    assert access_of(about(server, "mls-1", lines=1))["model"] == "mls-probe"


def test_a_process_worker_names_the_request_in_its_own_lines(server: Server) -> None:
    response = httpx.post(
        f"{server.url}/v2/models/tell-proc/infer", json=BODY, headers={"X-Request-ID": "proc-1"}
    )
    assert response.json()["outputs"][0]["data"] == ["proc-1"]
    line = model_line(about(server, "proc-1"), "models.tell")
    assert line["worker"] and line["pid"]  # the worker process's own JSON line


def test_errors_and_unrouted_requests_have_lines(server: Server) -> None:
    response = httpx.post(f"{server.url}/v2/models/nope/infer", json=BODY)
    access = access_of(about(server, response.headers["x-request-id"], lines=1))
    assert (access["status"], access["route"], access["model"]) == (404, "modelInfer", None)
    response = httpx.get(f"{server.url}/no/such/path")
    access = access_of(about(server, response.headers["x-request-id"], lines=1))
    assert (access["status"], access["route"], access["protocol"]) == (404, None, None)


def test_a_stream_is_logged_at_its_end(server: Server) -> None:
    with httpx.stream(
        "POST",
        f"{server.url}/v2/models/tell/infer_stream",
        json=BODY,
        headers={"X-Request-ID": "sse-1"},
    ) as response:
        body = b"".join(response.iter_bytes())
    access = access_of(about(server, "sse-1"))
    assert (access["route"], access["status"]) == ("modelInferStream", 200)
    assert access["bytes_out"] == len(body)


def test_the_management_api_has_lines(server: Server) -> None:
    response = httpx.get(f"{server.management_url}/models", headers={"X-Request-ID": "mgmt-1"})
    assert response.headers["x-request-id"] == "mgmt-1"
    access = access_of(about(server, "mgmt-1", lines=1))
    assert (access["protocol"], access["route"], access["status"]) == (
        "management",
        "listModels",
        200,
    )


# -- gRPC ------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_an_oip_grpc_call_is_named_by_its_metadata_id(
    server: Server, pb: SimpleNamespace
) -> None:
    async with grpc.aio.insecure_channel(target(server)) as channel:
        stubs = Stubs(channel, pb)
        call = stubs.ModelInfer(
            infer_request(pb, "tell", x=1.5), metadata=(("x-request-id", "grpc-1"),)
        )
        reply = await call
        assert reply.outputs[0].contents.bytes_contents == [b"grpc-1"]
        assert ("x-request-id", "grpc-1") in tuple(await call.trailing_metadata())
        # no id: one is made, in the trailing metadata; the OIP id is taken when there is one
        call = stubs.ModelInfer(infer_request(pb, "tell", x=1.5))
        await call
        made = dict(await call.trailing_metadata())["x-request-id"]
        assert MADE.fullmatch(made)
        message = infer_request(pb, "tell", x=1.5)
        message.id = "grpc-oip-2"
        call = stubs.ModelInfer(message)
        reply = await call
        assert reply.outputs[0].contents.bytes_contents == [b"grpc-oip-2"]
        assert dict(await call.trailing_metadata())["x-request-id"] == "grpc-oip-2"
        # a failing call has its id and its line too
        call = stubs.ModelInfer(infer_request(pb, "nope", x=1.5))
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await call
        assert failed.value.code() == grpc.StatusCode.NOT_FOUND
        failed_id = dict(failed.value.trailing_metadata())["x-request-id"]
    found = about(server, "grpc-1")
    assert model_line(found, "models.tell")
    access = access_of(found)
    assert (access["protocol"], access["route"], access["method"]) == (
        "oip_grpc",
        "ModelInfer",
        None,
    )
    assert access["path"] == "/inference.GRPCInferenceService/ModelInfer"
    assert (access["status"], access["code"], access["model"]) == (0, "OK", "tell")
    assert access["bytes_in"] > 0 and access["bytes_out"] > 0
    assert re.fullmatch(r"127\.0\.0\.1:\d+", access["peer"])
    assert access_of(about(server, made))["code"] == "OK"
    access = access_of(about(server, failed_id, lines=1))
    assert (access["status"], access["code"]) == (5, "NOT_FOUND")


@pytest.mark.anyio
async def test_an_oip_grpc_stream_is_one_line_at_its_end(
    server: Server, pb: SimpleNamespace
) -> None:
    async with grpc.aio.insecure_channel(target(server)) as channel:
        stubs = Stubs(channel, pb)
        requests = [infer_request(pb, "tell", x=float(i)) for i in range(3)]
        call = stubs.ModelStreamInfer(iter(requests), metadata=(("x-request-id", "stream-1"),))
        replies = [reply async for reply in call]
        assert len(replies) == 3
    found = about(server, "stream-1", lines=4)
    assert len([r for r in found if r["logger"] == "models.tell"]) == 3
    access = access_of(found)
    assert (access["route"], access["code"], access["model"]) == ("ModelStreamInfer", "OK", "tell")
    assert access["bytes_in"] == sum(r.ByteSize() for r in requests)


@pytest.mark.anyio
async def test_torchserve_grpc_and_health_calls(server: Server, ts: SimpleNamespace) -> None:
    async with grpc.aio.insecure_channel(target(server)) as channel:
        stub = ts.grpc.InferenceAPIsServiceStub(channel)
        call = stub.Predictions(
            ts.pb2.PredictionsRequest(model_name="ts-tell", input={"data": b"hi"}),
            metadata=(("x-request-id", "tsg-1"),),
        )
        reply = await call
        assert json.loads(reply.prediction) == {"request_id": "tsg-1"}
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        health = health_pb2_grpc.HealthStub(channel)
        await health.Check(health_pb2.HealthCheckRequest(), metadata=(("x-request-id", "hc-1"),))
    access = access_of(about(server, "tsg-1"))
    assert (access["protocol"], access["route"], access["model"]) == (
        "torchserve_grpc",
        "Predictions",
        "ts-tell",
    )
    access = access_of(about(server, "hc-1", lines=1))
    assert (access["protocol"], access["route"]) == ("grpc_health", "Check")


@pytest.mark.anyio
async def test_management_grpc_calls_have_lines(server: Server) -> None:
    from podium.server.grpc._pool import message_class

    request = message_class("org.pytorch.serve.grpc.management.ListModelsRequest")
    response = message_class("org.pytorch.serve.grpc.management.ManagementResponse")
    async with grpc.aio.insecure_channel(server.grpc_management) as channel:
        method = channel.unary_unary(
            "/org.pytorch.serve.grpc.management.ManagementAPIsService/ListModels",
            request_serializer=request.SerializeToString,
            response_deserializer=response.FromString,
        )
        await method(request(), metadata=(("x-request-id", "mg-1"),))
    access = access_of(about(server, "mg-1", lines=1))
    assert (access["protocol"], access["route"], access["code"]) == (
        "management_grpc",
        "ListModels",
        "OK",
    )


# -- the switch, the text format, and the start -----------------------------------------------


def test_text_lines_name_the_request_and_no_access_log_writes_none() -> None:
    with run_server(LOG_MODELS / "tell", args=("--no-access-log",)) as server:
        response = httpx.post(
            f"{server.url}/v2/models/tell/infer", json=BODY, headers={"X-Request-ID": "txt-1"}
        )
        assert response.headers["x-request-id"] == "txt-1"  # ids still go both ways
        deadline = time.monotonic() + 10
        while not any("[txt-1]" in line for line in server.lines):
            assert time.monotonic() < deadline, server.log
            time.sleep(0.02)
        (line,) = [line for line in server.lines if "[txt-1]" in line]
        assert re.fullmatch(
            r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO models\.tell \[txt-1\]: predicting in tell",
            line,
        )
        assert "podium.access" not in server.log


def test_the_start_is_free_of_library_noise(server: Server) -> None:
    # A process worker was spawned while gRPC's threads ran, and two HTTP listeners started.
    assert records(server)  # every line is JSON, grpc's own C++ lines included
    log = server.log
    assert "fork_posix" not in log and "Other threads are currently calling" not in log
    assert "Started server process" not in log
