"""OIP's model configuration extension as Triton serves it (issue 12, item 9), end to end with
``tritonclient``: ``GET /v2/models/{m}[/versions/{v}]/config`` and gRPC ``ModelConfig`` answer
Triton's ``ModelConfig`` (REST: its JSON, 64-bit numbers as numbers; gRPC: the message of
Triton's ``model_config.proto``, which ``tritonclient.grpc`` parses with its own copy of it)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.grpc.model_config_pb2 as mc
import tritonclient.http as thttp
from conftest import TEST_MODELS, Server, run_server
from e2e_helpers import PATIENCE
from grpc_helpers import target


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with run_server(TEST_MODELS / "triton") as running:
        yield running


@pytest.fixture(scope="module")
def rest(server: Server) -> thttp.InferenceServerClient:
    return thttp.InferenceServerClient(server.url.split("://", 1)[1].rstrip("/"))


@pytest.fixture(scope="module")
def grpc_client(server: Server) -> tgrpc.InferenceServerClient:
    return tgrpc.InferenceServerClient(target(server))


def io(config: dict[str, Any], key: str) -> list[tuple[str, str, list[Any]]]:
    return [(t["name"], t["data_type"], t["dims"]) for t in config[key]]


def test_simple_as_triton_describes_it(
    rest: thttp.InferenceServerClient, grpc_client: tgrpc.InferenceServerClient
) -> None:
    config = rest.get_model_config("simple")
    assert config == rest.get_model_config("simple", "1")  # its one version
    assert (config["name"], config["max_batch_size"]) == ("simple", 8)
    assert io(config, "input") == [("INPUT0", "TYPE_INT32", [16]), ("INPUT1", "TYPE_INT32", [16])]
    assert io(config, "output") == [
        ("OUTPUT0", "TYPE_INT32", [16]),
        ("OUTPUT1", "TYPE_INT32", [16]),
    ]
    assert config["input"][0] == {
        "name": "INPUT0",
        "data_type": "TYPE_INT32",
        "format": "FORMAT_NONE",
        "dims": [16],
        "is_shape_tensor": False,
        "allow_ragged_batch": False,
        "optional": False,
    }
    assert config["instance_group"] == [{"name": "simple_0", "kind": "KIND_MODEL", "count": 1}]
    assert config["version_policy"] == {"all": {}}
    for absent in ("dynamic_batching", "sequence_batching", "model_transaction_policy"):
        assert absent not in config
    # gRPC, as JSON (protobuf's: 64-bit numbers as strings) and as Triton's own message.
    as_json = grpc_client.get_model_config("simple", as_json=True)["config"]
    assert (as_json["name"], as_json["max_batch_size"]) == ("simple", 8)
    assert io(as_json, "input") == [
        ("INPUT0", "TYPE_INT32", ["16"]),
        ("INPUT1", "TYPE_INT32", ["16"]),
    ]
    message = grpc_client.get_model_config("simple").config
    assert isinstance(message, mc.ModelConfig)
    assert message.input[1].data_type == mc.TYPE_INT32 and list(message.input[1].dims) == [16]
    assert message.instance_group[0].kind == mc.ModelInstanceGroup.KIND_MODEL
    assert message.WhichOneof("scheduling_choice") is None
    assert message.version_policy.WhichOneof("policy_choice") == "all"


def test_batching_sequences_and_streams(
    rest: thttp.InferenceServerClient, grpc_client: tgrpc.InferenceServerClient
) -> None:
    batched = rest.get_model_config("batched")
    assert batched["dynamic_batching"] == {
        "preferred_batch_size": [4],
        "max_queue_delay_microseconds": 2500,
        "default_queue_policy": {"max_queue_size": 50},
    }
    # Podium's batches group whole requests: no tensor dimension is the batch.
    assert (batched["max_batch_size"], io(batched, "input")) == (0, [("x", "TYPE_FP64", [1])])
    assert batched["instance_group"][0]["count"] == 2
    message = grpc_client.get_model_config("batched").config
    assert message.WhichOneof("scheduling_choice") == "dynamic_batching"
    assert message.dynamic_batching.max_queue_delay_microseconds == 2500
    assert message.dynamic_batching.default_queue_policy.max_queue_size == 50

    sequence = rest.get_model_config("accumulator")
    assert sequence["sequence_batching"] == {"max_sequence_idle_microseconds": 60_000_000}
    assert io(sequence, "input") == [("INPUT", "TYPE_INT32", [1, 1])]
    message = grpc_client.get_model_config("accumulator").config
    assert message.sequence_batching.max_sequence_idle_microseconds == 60_000_000

    words = rest.get_model_config("words")
    assert words["model_transaction_policy"] == {"decoupled": True}  # a generator model
    assert io(words, "input") == [("text", "TYPE_STRING", [1])]
    assert grpc_client.get_model_config("words").config.model_transaction_policy.decoupled


def test_unknown_models_and_versions(
    server: Server, rest: thttp.InferenceServerClient, grpc_client: tgrpc.InferenceServerClient
) -> None:
    with pytest.raises(thttp.InferenceServerException) as caught:
        rest.get_model_config("nope")
    assert (
        caught.value.status() == "404"
        and "Request for unknown model: 'nope' is not found" in caught.value.message()
    )
    r = httpx.get(f"{server.url}/v2/models/simple/versions/3/config", timeout=PATIENCE)
    assert r.status_code == 404 and "version 3 is not found" in r.json()["error"]
    with pytest.raises(tgrpc.InferenceServerException) as failed:
        grpc_client.get_model_config("nope")
    assert failed.value.status() == "StatusCode.NOT_FOUND"
    r = httpx.post(f"{server.url}/v2/models/simple/config", timeout=PATIENCE)
    assert r.status_code == 405


def test_the_server_names_the_extension(rest: thttp.InferenceServerClient) -> None:
    assert "model_configuration" in rest.get_server_metadata()["extensions"]


@pytest.mark.parametrize("name", ["accumulator", "batched", "identity", "simple", "words"])
def test_what_perf_analyzer_reads_agrees_with_the_metadata(
    rest: thttp.InferenceServerClient, grpc_client: tgrpc.InferenceServerClient, name: str
) -> None:
    """perf_analyzer's model parser (its ``ModelParser::InitTriton``) reads the metadata's
    tensors, skips their first dimension when ``max_batch_size`` is above 0, looks every config
    input and output up in the metadata, and reads ``model_transaction_policy["decoupled"]``
    and ``response_cache["enable"]`` when they are there; the same over gRPC, whose config it
    turns into JSON with protobuf."""
    for config, metadata in (
        (rest.get_model_config(name), rest.get_model_metadata(name)),
        (
            grpc_client.get_model_config(name, as_json=True)["config"],
            grpc_client.get_model_metadata(name, as_json=True),
        ),
    ):
        batch = int(config.get("max_batch_size", 0))
        for key, tensors in (("input", "inputs"), ("output", "outputs")):
            declared = {t["name"]: t for t in metadata[tensors]}
            for tensor in config.get(key, []):
                shape = [int(d) for d in declared[tensor["name"]]["shape"]]
                dims = [int(d) for d in tensor["dims"]]
                assert (shape[1:] if batch else shape) == dims
                if batch:
                    assert shape[0] == -1
        policy = config.get("model_transaction_policy")
        assert policy is None or policy["decoupled"] is True
        assert "response_cache" not in config
