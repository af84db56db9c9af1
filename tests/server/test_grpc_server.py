"""The gRPC listener itself: its address in the ready line, grpc.health.v1.Health, reflection, and
the repository RPCs backed by the registry."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as triton
from conftest import EXAMPLES, Server, run_server
from e2e_helpers import FAILING_MODELS, PATIENCE, SLOW_MODELS
from google.protobuf import descriptor_pool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_helpers import SERVICE, Stubs, target
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from podium.config import ServerConfig

pytest_plugins = ["e2e_fixtures", "grpc_fixtures"]

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def test_ready_line_names_both_listeners(models_server: Server) -> None:
    assert models_server.url.startswith("http://127.0.0.1:")
    host, port = target(models_server).rsplit(":", 1)
    assert host == "127.0.0.1" and int(port) > 0
    with socket.create_connection((host, int(port)), timeout=PATIENCE):
        pass


def test_the_server_logs_once_that_grpc_calls_are_relayed(models_server: Server) -> None:
    # Only the inference listener relays (management is grpc.aio): one line, before ready.
    said = [line for line in models_server.log.splitlines() if "gRPC on" in line]
    assert len(said) == 1
    assert (
        f"gRPC on {target(models_server)}: calls relayed through grpcio {grpc.__version__}"
        in (said[0])
    )


def health_check(server: Server, service: str = "") -> Any:
    with grpc.insecure_channel(target(server)) as channel:
        return health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=PATIENCE
        )


def test_health_serving_when_every_model_is_ready(models_server: Server) -> None:
    assert health_check(models_server).status == SERVING
    assert health_check(models_server, SERVICE).status == SERVING


def test_health_not_serving_when_a_model_failed(failing_server: Server) -> None:
    assert health_check(failing_server).status == NOT_SERVING
    assert health_check(failing_server, SERVICE).status == NOT_SERVING


def test_health_of_an_unknown_service_is_not_found(models_server: Server) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        health_check(models_server, "no.such.Service")
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_health_watch_sees_the_models_become_ready(tmp_path: Path) -> None:
    # slow-load/slow's load() waits for a file. run_server returns only once every model has
    # loaded, so it is entered in a thread on a port chosen here; the gRPC listener is bound
    # (and answers health) before the models load.
    gate = tmp_path / "loaded"
    port = free_port()
    starting = run_server(
        SLOW_MODELS,
        args=("--grpc-port", str(port)),
        env={"PODIUM_E2E_LOAD_GATE": str(gate)},
    )
    with ThreadPoolExecutor(1) as pool:
        entered = pool.submit(starting.__enter__)
        try:
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                grpc.channel_ready_future(channel).result(timeout=PATIENCE)
                watch = health_pb2_grpc.HealthStub(channel).Watch(
                    health_pb2.HealthCheckRequest(service=""), timeout=PATIENCE
                )
                assert next(watch).status == NOT_SERVING
                client = triton.InferenceServerClient(f"127.0.0.1:{port}")
                assert not client.is_server_ready()
                index = client.get_model_repository_index(as_json=True)["models"]
                assert {m["name"]: m["state"] for m in index}["slow"] == "LOADING"
                gate.touch()
                assert next(watch).status == SERVING
                watch.cancel()
                assert client.is_server_ready()
        finally:
            gate.touch()
            entered.result(PATIENCE)
            starting.__exit__(None, None, None)


# -- reflection -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("framing", "response"),
    [
        ("mlserver", "inference.ModelInferResponse"),
        ("triton", "inference.ModelStreamInferResponse"),
    ],
)
def test_reflection_describes_the_service_as_served(
    request: pytest.FixtureRequest, framing: str, response: str
) -> None:
    server = request.getfixturevalue("models_server" if framing == "mlserver" else "triton_server")
    with grpc.insecure_channel(target(server)) as channel:
        database = ProtoReflectionDescriptorDatabase(channel)
        services = set(database.get_services())
        assert {SERVICE, "grpc.health.v1.Health"} <= services
        pool = descriptor_pool.DescriptorPool(database)
        service = pool.FindServiceByName(SERVICE)
        stream = service.methods_by_name["ModelStreamInfer"]
        assert stream.output_type.full_name == response
        assert (
            service.methods_by_name["ModelInfer"]
            .input_type.fields_by_name["raw_input_contents"]
            .number
            == 7
        )
        assert pool.FindServiceByName("grpc.health.v1.Health").methods_by_name["Check"]


# -- repository RPCs --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def repository_server() -> Iterator[Server]:
    """Its own server: these tests change what it serves (each puts back what it changed).
    Loading and unloading through the inference listeners needs ``--model-control inference``
    (refused by default: tests/server/test_model_control.py)."""
    with run_server(FAILING_MODELS, args=("--model-control", "inference")) as server:
        yield server


def x() -> list[triton.InferInput]:
    inp = triton.InferInput("x", [1], "INT64")
    inp.set_data_from_numpy(np.array([1]))
    return [inp]


def states(client: triton.InferenceServerClient) -> dict[str, tuple[str, str]]:
    index = client.get_model_repository_index(as_json=True)["models"]
    return {m["name"]: (m["state"], m.get("reason", "")) for m in index}


def test_unload_then_load_again(repository_server: Server) -> None:
    client = triton.InferenceServerClient(target(repository_server))
    client.unload_model("fine")
    assert not client.is_model_ready("fine")
    assert states(client)["fine"] == ("UNAVAILABLE", "unloaded on request")
    with pytest.raises(triton.InferenceServerException) as caught:
        client.infer("fine", x())
    # OIP answers an unloaded model as unknown, in Triton's words (docs/mlserver.md)
    assert caught.value.status() == "StatusCode.NOT_FOUND"
    assert caught.value.message().startswith(
        "Request for unknown model: 'fine' has no available versions"
    )

    client.load_model("fine")
    assert client.is_model_ready("fine")
    assert states(client)["fine"] == ("READY", "")
    assert client.infer("fine", x()).as_numpy("fine").tolist() == [True]


def test_an_unloaded_model_does_not_make_the_server_unready(repository_server: Server) -> None:
    client = triton.InferenceServerClient(target(repository_server))
    assert not client.is_server_ready()  # 'failing' failed to load
    client.unload_model("failing")
    assert client.is_server_ready()
    assert health_check(repository_server).status == SERVING
    with pytest.raises(triton.InferenceServerException):
        client.load_model("failing")  # fails again: the server is not ready again
    assert not client.is_server_ready()


def test_loading_a_failing_model_runs_its_load_again_and_reports(
    repository_server: Server,
) -> None:
    client = triton.InferenceServerClient(target(repository_server))
    with pytest.raises(triton.InferenceServerException) as caught:
        client.load_model("failing")
    assert caught.value.status() == "StatusCode.INTERNAL"
    assert "model 'failing' failed to load" in caught.value.message()
    assert "the weights file is missing (on purpose)" in caught.value.message()
    assert states(client)["failing"][0] == "UNAVAILABLE"


def test_repository_errors(repository_server: Server, pb: Any) -> None:
    client = triton.InferenceServerClient(target(repository_server))
    for call in (lambda: client.load_model("nope"), lambda: client.unload_model("nope")):
        with pytest.raises(triton.InferenceServerException) as caught:
            call()
        assert caught.value.status() == "StatusCode.NOT_FOUND"
        assert "Request for unknown model: 'nope' is not found" in caught.value.message()
    # A config that changes what Podium does not let a load change (issue 12, item 1: a load's
    # config changes what the model declares, test_oip_repository.py), and a model sent as files.
    with pytest.raises(triton.InferenceServerException) as caught:
        client.load_model("fine", config='{"instance_group": [{"count": 2}]}')
    assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "failed to load model 'fine'" in caught.value.message()
    assert "workers are scaled through the management API" in caught.value.message()
    with pytest.raises(triton.InferenceServerException) as caught:
        client.load_model("fine", config="{}", files={"file:1/model.py": b"print()"})
    assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "file:1/model.py" in caught.value.message() and "not supported" in caught.value.message()
    assert client.is_model_ready("fine")


def test_kserve_style_load_names_the_model_in_field_one(repository_server: Server, pb: Any) -> None:
    with grpc.insecure_channel(target(repository_server)) as channel:
        stubs = Stubs(channel, pb)
        # KServe's RepositoryModelUnloadRequest/LoadRequest: `string model_name = 1`.
        unloaded = stubs.RepositoryModelUnload(
            pb.RepositoryModelUnloadRequest(repository_name="fine")
        )
        assert (unloaded.model_name, unloaded.isUnloaded) == ("fine", True)
        loaded = stubs.RepositoryModelLoad(pb.RepositoryModelLoadRequest(repository_name="fine"))
        assert (loaded.model_name, loaded.isLoaded) == ("fine", True)


# -- configuration --------------------------------------------------------------------------------


def test_grpc_settings_are_validated() -> None:
    assert ServerConfig().protocols.grpc_stream_format == "triton"
    assert ServerConfig().protocols.grpc_max_message_size == 64 * 1024 * 1024
    assert ServerConfig(grpc_stream_format="mlserver").protocols.grpc_stream_format == "mlserver"
    with pytest.raises(ValueError, match="grpc-stream-format must be 'triton' or 'mlserver'"):
        ServerConfig(grpc_stream_format="kserve")
    for bad in (0, True, 2**31, "1"):
        with pytest.raises(ValueError, match="grpc-max-message-size"):
            ServerConfig(grpc_max_message_size=bad)  # type: ignore[arg-type]


def test_cli_refuses_an_unknown_stream_format() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "podium",
            "serve",
            str(EXAMPLES / "echo"),
            "--grpc-stream-format",
            "x",
        ],
        capture_output=True,
        text=True,
        timeout=PATIENCE,
    )
    assert result.returncode == 2
    assert "--grpc-stream-format" in result.stderr


def test_a_health_watch_ends_at_shutdown_without_holding_it_up() -> None:
    with run_server(EXAMPLES / "echo") as server:
        with grpc.insecure_channel(target(server)) as channel:
            watch = health_pb2_grpc.HealthStub(channel).Watch(
                health_pb2.HealthCheckRequest(service=""), timeout=PATIENCE
            )
            assert next(watch).status == SERVING
            server.proc.terminate()
            assert [r.status for r in watch] == [NOT_SERVING]  # then the stream ends
        assert server.proc.wait(5) == 0  # well within the 10 s grace
