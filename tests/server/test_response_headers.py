"""Response headers a model asks for reach the client: the ``headers`` parameter of an OIP
response (native models and MLServer runtimes, MLServer's convention) as HTTP headers and gRPC
trailing metadata, out of the body; a sequence model's ``Context.headers`` over gRPC too. Headers
a protocol cannot carry are left out, never sent half-formed."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import grpc
import httpx
import pytest
from conftest import TEST_MODELS, Server, run_server
from e2e_helpers import PATIENCE
from grpc_helpers import Stubs, target

pytest_plugins = ["e2e_fixtures", "grpc_fixtures"]

SENT = {"x-answered-by": "answer", "x-upper": "Case"}
NOT_SENT = ("bad name", "x-injected", "set-cookie")  # and, over gRPC, gRPC's own grpc-status


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with run_server(
        TEST_MODELS / "headers" / "answer",
        TEST_MODELS / "mlserver" / "probe",
        TEST_MODELS / "sequences" / "running-sum",
    ) as running:
        yield running


def body(model_input: str = "x") -> dict[str, Any]:
    return {"inputs": [{"name": model_input, "shape": [1], "datatype": "FP32", "data": [1.5]}]}


def test_http_sends_the_headers_and_keeps_them_out_of_the_body(server: Server) -> None:
    r = httpx.post(f"{server.url}/v2/models/answer/infer", json=body(), timeout=PATIENCE)
    assert r.status_code == 200, r.text
    for name, value in SENT.items():
        assert r.headers[name] == value
    for name in NOT_SENT:
        assert name not in r.headers
    assert r.json()["parameters"] == {"kept": "yes"}


def test_http_binary_answers_carry_them_too(server: Server) -> None:
    request = {**body(), "parameters": {"binary_data_output": True}}
    r = httpx.post(f"{server.url}/v2/models/answer/infer", json=request, timeout=PATIENCE)
    assert r.status_code == 200, r.text
    assert r.headers["x-answered-by"] == "answer"
    assert "inference-header-content-length" in r.headers


def test_grpc_sends_them_as_trailing_metadata(server: Server, pb: SimpleNamespace) -> None:
    request = pb.ModelInferRequest(model_name="answer")
    tensor = request.inputs.add(name="x", datatype="FP32", shape=[1])
    tensor.contents.fp32_contents.append(1.5)
    with grpc.insecure_channel(target(server)) as channel:
        response, call = Stubs(channel, pb).ModelInfer.with_call(request, timeout=PATIENCE)
    trailing = dict(call.trailing_metadata())
    for name, value in SENT.items():
        assert trailing[name] == value
    for name in (*NOT_SENT, "grpc-status"):
        assert name not in trailing
    assert set(response.parameters) == {"kept"}


def test_an_mlserver_runtime_sets_them_as_with_mlserver(
    server: Server, pb: SimpleNamespace
) -> None:
    text = {"name": "text", "shape": [1], "datatype": "BYTES", "data": ["abc"]}
    r = httpx.post(
        f"{server.url}/v2/models/mls-probe/infer",
        json={"inputs": [text]},
        headers={"x-probe": "hello"},
        timeout=PATIENCE,
    )
    assert r.status_code == 200, r.text
    assert r.headers["x-probe-echo"] == "hello"
    assert "headers" not in (r.json().get("parameters") or {})
    request = pb.ModelInferRequest(model_name="mls-probe")
    tensor = request.inputs.add(name="text", datatype="BYTES", shape=[1])
    tensor.contents.bytes_contents.append(b"abc")
    with grpc.insecure_channel(target(server)) as channel:
        _, call = Stubs(channel, pb).ModelInfer.with_call(
            request, metadata=(("x-probe", "by-grpc"),), timeout=PATIENCE
        )
    assert dict(call.trailing_metadata())["x-probe-echo"] == "by-grpc"


def test_a_sequence_model_s_context_headers_reach_grpc_clients(
    server: Server, pb: SimpleNamespace
) -> None:
    request = pb.ModelInferRequest(model_name="running-sum")
    request.parameters["sequence_id"].string_param = "headers-1"
    request.parameters["sequence_start"].bool_param = True  # Triton's rule on OIP
    tensor = request.inputs.add(name="add", datatype="INT64", shape=[1])
    tensor.contents.int64_contents.append(4)
    with grpc.insecure_channel(target(server)) as channel:
        _, call = Stubs(channel, pb).ModelInfer.with_call(request, timeout=PATIENCE)
    assert dict(call.trailing_metadata())["x-running-total"] == "4"
