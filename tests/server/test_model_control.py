"""The inference listeners never change what is served, and readiness tells the truth.

End to end, with the clients users have: ``tritonclient``'s ``unload_model`` / ``load_model`` on the
gRPC inference port are refused (``PERMISSION_DENIED``, naming the management API) unless the
server runs with ``--model-control inference``; a model unloaded or failed is not ready, and the
server's readiness (``/v2/health/ready``, ``/ping``, ``ServerReady``, ``grpc.health.v1``) follows
the rule of ``docs/protocols.md`` on every protocol alike.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton
from conftest import TEST_MODELS, Server, run_server
from e2e_helpers import FAILING_MODELS, PATIENCE, SLOW_MODELS
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_helpers import SERVICE, Stubs, target

import podium

pytest_plugins = ["e2e_fixtures", "grpc_fixtures"]

SERVING = health_pb2.HealthCheckResponse.SERVING


@pytest.fixture(scope="module")
def default_server() -> Iterator[Server]:
    """The default: model control on the management listeners only."""
    with run_server(FAILING_MODELS) as server:
        yield server


@pytest.fixture(scope="module")
def opened_server() -> Iterator[Server]:
    """``--model-control inference`` without ``--auth`` (it warns)."""
    with run_server(FAILING_MODELS, args=("--model-control", "inference")) as server:
        yield server


def x() -> list[triton.InferInput]:
    inp = triton.InferInput("x", [1], "INT64")
    inp.set_data_from_numpy(np.array([1]))
    return [inp]


def refused(call: Any) -> str:
    with pytest.raises(triton.InferenceServerException) as caught:
        call()
    assert caught.value.status() == "StatusCode.PERMISSION_DENIED", caught.value.message()
    return str(caught.value.message())


# -- refused by default -------------------------------------------------------------------------


def test_tritonclient_cannot_unload_or_load_through_the_inference_port(
    default_server: Server,
) -> None:
    client = triton.InferenceServerClient(target(default_server))
    for call, action in [
        (lambda: client.unload_model("fine"), "unloading model 'fine'"),
        (lambda: client.load_model("failing"), "loading model 'failing'"),
        (lambda: client.load_model("fine", config='{"max_batch_size": 8}'), "loading model"),
        (lambda: client.unload_model("nope"), "unloading model 'nope'"),  # no NOT_FOUND: no probing
    ]:
        message = refused(call)
        assert action in message
        assert "is refused on the inference listener (oip_grpc)" in message
        # It names where model control is, with the addresses the server listens on.
        assert default_server.management_url in message
        assert default_server.grpc_management in message
        assert "--model-control inference" in message
    # Nothing changed: the model serves, the index is still readable.
    assert client.is_model_ready("fine")
    assert client.infer("fine", x()).as_numpy("fine").tolist() == [True]
    index = client.get_model_repository_index(as_json=True)["models"]
    assert {m["name"]: m["state"] for m in index} == {"failing": "UNAVAILABLE", "fine": "READY"}
    assert "model control is open" not in default_server.log


def test_kserve_style_repository_calls_are_refused_too(default_server: Server, pb: Any) -> None:
    with grpc.insecure_channel(target(default_server)) as channel:
        stubs = Stubs(channel, pb)
        for call in (
            lambda: stubs.RepositoryModelUnload(pb.RepositoryModelUnloadRequest(model_name="fine")),
            lambda: stubs.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name="fine")),
        ):
            with pytest.raises(grpc.RpcError) as caught:
                call()
            assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert "management API" in caught.value.details()
    assert triton.InferenceServerClient(target(default_server)).is_model_ready("fine")


# -- opened with --model-control inference ----------------------------------------------------------


def test_model_control_inference_lets_tritonclient_unload_and_load(opened_server: Server) -> None:
    assert "model control is open on the inference listeners" in opened_server.log
    assert "without --auth" in opened_server.log
    client = triton.InferenceServerClient(target(opened_server))
    client.unload_model("fine")
    assert not client.is_model_ready("fine")
    client.load_model("fine")
    assert client.is_model_ready("fine")
    assert client.infer("fine", x()).as_numpy("fine").tolist() == [True]


def test_model_control_inference_with_auth_needs_the_inference_key(tmp_path: Path) -> None:
    key_file = tmp_path / "key_file.json"
    with run_server(
        FAILING_MODELS,
        args=("--model-control", "inference", "--auth", "--key-file", str(key_file)),
    ) as server:
        assert "without --auth" not in server.log
        client = triton.InferenceServerClient(target(server))
        with pytest.raises(triton.InferenceServerException) as caught:
            client.unload_model("fine")
        assert caught.value.status() == "StatusCode.UNAUTHENTICATED"
        key = json.loads(key_file.read_text())["inference"]["key"]
        headers = {"authorization": f"Bearer {key}"}
        client.unload_model("fine", headers=headers)
        assert not client.is_model_ready("fine", headers=headers)


def test_an_unknown_model_control_is_refused_at_start() -> None:
    with pytest.raises(RuntimeError, match="--model-control"):
        with run_server(FAILING_MODELS, args=("--model-control", "everyone")):
            pass


# -- readiness ------------------------------------------------------------------------------------


def health(server: Server, service: str = "") -> bool:
    with grpc.insecure_channel(target(server)) as channel:
        answer = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=PATIENCE
        )
    return bool(answer.status == SERVING)


def server_ready(server: Server) -> bool:
    """The server's readiness, asked on every protocol; they must agree."""
    ready = httpx.get(f"{server.url}/v2/health/ready", timeout=PATIENCE)
    ping = httpx.get(f"{server.url}/ping", timeout=PATIENCE)
    client = triton.InferenceServerClient(target(server))
    seen = {
        "/v2/health/ready": ready.status_code == 200 and ready.json() == {"ready": True},
        "/ping": ping.status_code == 200 and ping.json() == {"status": "Healthy"},
        "ServerReady": client.is_server_ready(),
        "health ''": health(server),
        f"health {SERVICE}": health(server, SERVICE),
    }
    assert len(set(seen.values())) == 1, seen
    return seen["/v2/health/ready"]


def model_ready(server: Server, name: str) -> bool:
    """A model's readiness, asked on every protocol; they must agree."""
    oip = httpx.get(f"{server.url}/v2/models/{name}/ready", timeout=PATIENCE)
    truss = httpx.get(f"{server.url}/v1/models/{name}", timeout=PATIENCE)
    client = triton.InferenceServerClient(target(server))
    seen = {
        "OIP REST": oip.status_code == 200 and oip.json()["ready"],
        "Truss": truss.status_code == 200,
        "ModelReady": client.is_model_ready(name),
    }
    assert len(set(seen.values())) == 1, seen
    return bool(seen["OIP REST"])


def state(server: Server, name: str) -> str:
    meta = httpx.get(f"{server.url}/v2/models/{name}", timeout=PATIENCE).json()
    return str(meta["parameters"]["state"])


def test_readiness_after_unload_and_failed_load_on_every_protocol(tmp_path: Path) -> None:
    with run_server(FAILING_MODELS, args=("--model-control", "inference")) as server:
        client = triton.InferenceServerClient(target(server))
        # 'failing' failed to load at start: it is not ready, nor is the server.
        assert not model_ready(server, "failing") and state(server, "failing") == "failed"
        assert model_ready(server, "fine")
        assert not server_ready(server)

        # An unloaded model is not ready, and its calls get 503 / UNAVAILABLE; the server's
        # readiness does not count it (an unload is a decision about one model).
        client.unload_model("fine")
        assert not model_ready(server, "fine") and state(server, "fine") == "unloaded"
        r = httpx.post(f"{server.url}/v1/models/fine:predict", json={}, timeout=PATIENCE)
        assert r.status_code == 503 and "was unloaded" in r.json()["error"]
        # By protocol: OIP answers it as unknown, as Triton and MLServer do; TorchServe's
        # routes as a model without workers, 503.
        r = httpx.post(f"{server.url}/predictions/fine", json={}, timeout=PATIENCE)
        assert r.status_code == 503 and "was unloaded" in r.text
        r = httpx.post(f"{server.url}/v2/models/fine/infer", json={"inputs": []}, timeout=PATIENCE)
        assert r.status_code == 404
        assert r.json()["error"].startswith(
            "Request for unknown model: 'fine' has no available versions: it was unloaded"
        )
        r = httpx.post(
            f"{server.url}/v2/models/fine/versions/1/infer", json={"inputs": []}, timeout=PATIENCE
        )
        assert r.status_code == 404 and "'fine' version 1 is not loaded" in r.json()["error"]
        assert not server_ready(server)  # 'failing' still failed
        client.unload_model("failing")
        assert server_ready(server)  # nothing failed; both unloaded on request

        # Loading again: a version whose load fails counts again, as failed.
        with pytest.raises(triton.InferenceServerException):
            client.load_model("failing")
        assert not model_ready(server, "failing") and state(server, "failing") == "failed"
        assert not server_ready(server)
        client.load_model("fine")
        assert model_ready(server, "fine")
        assert not server_ready(server)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    directory = tmp_path / "store"
    shutil.copytree(SLOW_MODELS / "slow", directory / "slow")
    shutil.copytree(TEST_MODELS / "management" / "fails-load", directory / "fails-load")
    return directory


def test_a_registration_loading_in_the_background_leaves_the_server_ready(
    tmp_path: Path, store: Path
) -> None:
    gate = tmp_path / "loaded"
    with run_server(
        "fine",  # relative to cwd, as an operator types it
        args=("--model-store", str(store)),
        # Another working directory: the server must still import the podium under test.
        env={
            "PODIUM_E2E_LOAD_GATE": str(gate),
            "PYTHONPATH": str(Path(podium.__file__).parents[1]),
        },
        cwd=FAILING_MODELS,
    ) as server:
        with httpx.Client(base_url=server.management_url, timeout=PATIENCE) as api:
            assert server_ready(server)
            answer = api.post("/models", params={"url": "slow", "synchronous": "false"})
            assert answer.status_code == 202, answer.text
            # While it loads: the model is not ready, the server stays ready (a pod whose operator
            # registers a model is not taken out of its Service for the load's duration).
            assert not model_ready(server, "slow")
            assert server_ready(server)
            gate.touch()
            start = time.monotonic()
            while not model_ready(server, "slow"):
                assert time.monotonic() - start < PATIENCE
                time.sleep(0.02)
            assert server_ready(server)

            # A registration whose load fails in the background leaves a failed version: the
            # server is not ready until the operator unregisters it.
            answer = api.post("/models", params={"url": "fails-load", "synchronous": "false"})
            assert answer.status_code == 202, answer.text
            start = time.monotonic()
            while state(server, "fails-load") == "loading":
                assert time.monotonic() - start < PATIENCE
                time.sleep(0.02)
            assert state(server, "fails-load") == "failed"
            assert not server_ready(server)
            assert api.delete("/models/fails-load").status_code == 200
            assert server_ready(server)

            # The start-up model is listed as the operator gave it, never as a path of the server.
            listed = {m["modelName"]: m["modelUrl"] for m in api.get("/models").json()["models"]}
            assert listed == {"fine": "fine/model.py", "slow": "slow"}
            (described,) = api.get("/models/fine").json()
            assert described["modelUrl"] == "fine/model.py"
            assert str(FAILING_MODELS) not in api.get("/models/fine").text
