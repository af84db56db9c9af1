"""KServe's own Python clients (InferenceRESTClient with protocol v2, InferenceGRPCClient) against
a local ``podium serve`` of the echo example, as docs/kserve.md calls a deployed predictor: server
live and ready, model ready, inference with JSON and binary tensors (BYTES included), and what an
unknown model answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, run_server
from kserve_fixtures import SENT, run_sdk, tools_python

__all__ = ["tools_python"]  # the fixture, imported for the test below

pytestmark = pytest.mark.timeout(600)  # the first use of the tools' venv may install it


@pytest.fixture(scope="module")
def answers(tools_python: Path) -> dict[str, Any]:
    with run_server(EXAMPLES / "echo") as server:
        grpc_address = server.addresses["grpc-inference"]
        return run_sdk(tools_python, "clients", server.url, grpc_address, "echo")


def test_the_rest_client_sees_a_live_ready_server_and_model(answers: dict[str, Any]) -> None:
    rest = answers["rest"]
    assert (rest["server_live"], rest["server_ready"], rest["model_ready"]) == (True, True, True)
    assert rest["unknown_model_ready"] is False


def test_the_rest_client_infers_with_json_and_binary_tensors(answers: dict[str, Any]) -> None:
    rest = answers["rest"]
    assert rest["infer_json"] == {"outputs": SENT, "binary": False}
    # binary inputs, and binary outputs asked for: the binary tensor extension both ways
    assert rest["infer_binary"] == {"outputs": SENT, "binary": True}


def test_the_rest_client_gets_podiums_404_for_an_unknown_model(answers: dict[str, Any]) -> None:
    failure = answers["rest"]["infer_unknown_model"]
    assert failure["exception"] == "HTTPStatusError"
    assert failure["message"].startswith(
        "Request for unknown model: 'no-such-model' is not found, '404 Not Found'"
    )


def test_the_grpc_client_sees_a_live_ready_server_and_model(answers: dict[str, Any]) -> None:
    grpc = answers["grpc"]
    assert (grpc["server_live"], grpc["server_ready"], grpc["model_ready"]) == (True, True, True)
    assert grpc["unknown_model_ready"] is False


def test_the_grpc_client_infers_with_typed_and_raw_contents(answers: dict[str, Any]) -> None:
    grpc = answers["grpc"]
    assert grpc["infer_json"] == SENT  # typed *_contents
    assert grpc["infer_binary"] == SENT  # raw_input_contents, answered with raw_output_contents


def test_the_grpc_client_gets_not_found_for_an_unknown_model(answers: dict[str, Any]) -> None:
    failure = answers["grpc"]["infer_unknown_model"]
    assert (failure["status"], failure["message"]) == (
        "NOT_FOUND",
        "Request for unknown model: 'no-such-model' is not found",
    )
