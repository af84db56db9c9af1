"""Errors built from what a client sent are bounded, on every protocol and in the log.

A model that quotes its input in an exception (``tests/models/serve/raiser``), or a request whose
bad value is quoted by Podium's own checks, once turned a 20 MB value into a 20 MB error body and
40 MB of log lines per request. Each answer here stays under 2 KiB, saying how long the message
was, and the server's log grows by a bounded amount.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton
from conftest import Server, run_server
from e2e_helpers import PATIENCE, SERVE_MODELS, error_text
from grpc_helpers import target

pytest_plugins = ["e2e_fixtures"]

HUGE = 20 * 1024 * 1024
#: The most one bad request may add to the log (a bounded message and traceback).
LOG_BUDGET = 64 * 1024


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with run_server(SERVE_MODELS / "raiser") as running:  # --max-request-size: 64 MiB
        yield running


def logged(server: Server) -> int:
    return sum(len(line) + 1 for line in server.lines)


def bytes_input(value: str) -> dict[str, Any]:
    return {
        "name": "why",
        "shape": [1],
        "datatype": "BYTES",
        "parameters": {"content_type": "str"},
        "data": [value],
    }


def check_http(server: Server, response: httpx.Response, status: int, starts: str) -> None:
    assert response.status_code == status
    assert len(response.content) < 2048, len(response.content)
    message = error_text(response)
    assert message.startswith(starts), message[:200]
    if message != "Internal Server Error (in model/chainlet).":
        assert message.endswith(" characters)") and "… (cut at 1024 of " in message


@pytest.mark.parametrize(
    ("path", "body", "status", "starts"),
    [
        (
            "/v1/models/raiser:predict",  # Truss's answer keeps the model's message back
            {"why": "v" * HUGE},
            500,
            "Internal Server Error (in model/chainlet).",
        ),
        (
            "/predictions/raiser",
            {"why": "v" * HUGE},
            500,
            "model 'raiser' predict raised ValueError: the model refused: vvvv",
        ),
        (
            "/v2/models/raiser/infer",
            {"inputs": [bytes_input("v" * HUGE)]},
            500,
            "model 'raiser' predict raised ValueError: the model refused: ['vvvv",
        ),
        (
            "/v2/models/raiser/infer",
            {"inputs": [{"name": "why", "shape": [1], "datatype": "Q" * HUGE, "data": [1]}]},
            400,
            "input 'why' has unknown datatype 'QQQQ",
        ),
    ],
)
def test_a_20_mb_value_gives_a_bounded_answer_and_log_over_http(
    server: Server, path: str, body: Any, status: int, starts: str
) -> None:
    before = logged(server)
    data = json.dumps(body).encode()
    headers = {"content-type": "application/json"}
    response = httpx.post(f"{server.url}{path}", content=data, headers=headers, timeout=PATIENCE)
    check_http(server, response, status, starts)
    # Once the answer is sent, what it logged is in the pipe; the next request flushes it.
    assert httpx.get(f"{server.url}/v2/health/ready", timeout=PATIENCE).status_code == 200
    assert logged(server) - before < LOG_BUDGET


def check_grpc(caught: Any, status: str, starts: str) -> None:
    assert caught.value.status() == status
    message = caught.value.message()
    assert len(message.encode()) < 2048, len(message)
    assert message.startswith(starts), message[:200]
    assert "… (cut at 1024 of " in message


def test_a_20_mb_value_gives_a_bounded_status_and_log_over_grpc(server: Server) -> None:
    before = logged(server)
    client = triton.InferenceServerClient(target(server))
    why = triton.InferInput("why", [1], "BYTES")
    why.set_data_from_numpy(np.array([b"v" * HUGE], dtype=np.object_))
    with pytest.raises(triton.InferenceServerException) as caught:
        client.infer("raiser", [why])
    check_grpc(
        caught,
        "StatusCode.INTERNAL",
        "model 'raiser' predict raised ValueError: the model refused: [b'vvvv",
    )

    with pytest.raises(triton.InferenceServerException) as caught:
        client.infer("m" * HUGE, [why])
    check_grpc(caught, "StatusCode.NOT_FOUND", "Request for unknown model: 'mmmm")

    bad = triton.InferInput("why", [1], "INT64")
    bad.set_data_from_numpy(np.array([1]))
    bad._input.datatype = "Q" * HUGE  # what no honest client sends
    with pytest.raises(triton.InferenceServerException) as caught:
        client.infer("raiser", [bad])
    check_grpc(caught, "StatusCode.INVALID_ARGUMENT", "input 'why' has unknown datatype 'QQQQ")

    assert client.is_server_ready()
    assert logged(server) - before < 3 * LOG_BUDGET
