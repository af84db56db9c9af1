"""``podium serve --triton``: Triton's behaviour in one flag (issue 22, section 1) — its ports,
model control on the inference listeners, system shared memory, raw gRPC answers — with the
flags given beside it winning; and Triton's error texts, which its clients match on, on a real
server with ``tritonclient`` (HTTP and gRPC) unchanged."""

from __future__ import annotations

from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
from conftest import TEST_MODELS, run_server
from grpc_helpers import target
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from podium._server_fields import PRESETS
from podium.cli import _merge
from podium.config import SETTINGS

SIMPLE = TEST_MODELS / "triton" / "simple"


def test_the_preset_sets_what_a_triton_user_needs_and_flags_win(tmp_path: Path) -> None:
    config = _merge(None, {"triton": True})
    assert (config.listeners.http_port, config.listeners.grpc_port) == (8000, 8001)
    assert config.listeners.metrics_port == 8002
    assert config.management.model_control == "inference"
    assert config.shared_memory.mode == "system"
    assert config.protocols.grpc_output_contents == "raw"
    assert config.protocols.grpc_stream_format == "triton"
    assert config.protocols.server_name == "triton"
    # a flag given with it wins; without it, Podium's own defaults
    assert _merge(None, {"triton": True, "http_port": 9000}).listeners.http_port == 9000
    plain = _merge(None, {})
    assert (plain.listeners.http_port, plain.management.model_control) == (8080, "management")
    # the same from a --config file
    yaml = tmp_path / "podium.yaml"
    yaml.write_text("triton: true\ngrpc-port: 9001\n")
    from_file = _merge(yaml, {})
    assert (from_file.listeners.grpc_port, from_file.shared_memory.mode) == (9001, "system")
    assert set(PRESETS["triton"]) <= set(SETTINGS)  # each a setting, as its flag names it


def _typed_request() -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        tensor = request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        tensor.contents.int_contents.extend(range(16))
    return request


def test_a_triton_user_needs_one_flag() -> None:
    with run_server(SIMPLE, args=("--triton",)) as server:
        url = server.url.removeprefix("http://")
        http = thttp.InferenceServerClient(url)
        grpc_client = tgrpc.InferenceServerClient(target(server))
        # model control on the inference port (Triton's --model-control-mode=explicit)
        grpc_client.unload_model("simple")
        assert not grpc_client.is_model_ready("simple")
        http.load_model("simple")
        assert http.is_model_ready("simple")
        # Triton's name in the server metadata (its health_metadata examples check it)
        assert http.get_server_metadata()["name"] == "triton"
        assert grpc_client.get_server_metadata().name == "triton"
        # system shared memory is on
        assert grpc_client.get_system_shared_memory_status(as_json=True) == {}
        assert http.get_system_shared_memory_status() == []
        # a request with typed contents is answered raw, as Triton answers
        with grpc.insecure_channel(target(server)) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            answer = stub.ModelInfer(_typed_request(), timeout=30)
        assert len(answer.raw_output_contents) == 2
        out = np.frombuffer(answer.raw_output_contents[0], dtype=np.int32)
        assert out.tolist() == [2 * i for i in range(16)]
        # Triton's words for an unknown model, which its example clients compare
        for client in (http, grpc_client):
            with pytest.raises(InferenceServerException) as caught:
                client.get_model_metadata("nope")
            assert caught.value.message().startswith(
                "Request for unknown model: 'nope' is not found"
            )
        # and for raw and typed contents in one request
        request = _typed_request()
        request.raw_input_contents.append(np.zeros(16, dtype=np.int32).tobytes())
        with grpc.insecure_channel(target(server)) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            with pytest.raises(grpc.RpcError) as failed:
                stub.ModelInfer(request, timeout=30)
        assert failed.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert (failed.value.details() or "").startswith(
            "contents field must not be specified when using raw_input_contents for 'INPUT0' "
            "for model 'simple'"
        )
        http.close()
        grpc_client.close()


def test_without_the_flag_podiums_defaults_stand() -> None:
    with run_server(SIMPLE) as server:
        grpc_client = tgrpc.InferenceServerClient(target(server))
        with pytest.raises(InferenceServerException) as caught:
            grpc_client.unload_model("simple")
        assert caught.value.status() == "StatusCode.PERMISSION_DENIED"
        with grpc.insecure_channel(target(server)) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            answer = stub.ModelInfer(_typed_request(), timeout=30)
        assert not answer.raw_output_contents  # typed in, typed out (MLServer, KServe)
        assert grpc_client.get_server_metadata().name == "podium"
        grpc_client.close()
