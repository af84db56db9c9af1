"""OIP's model repository extension over REST, as Triton serves it (issue 12, item 1), end to end
with ``tritonclient.http`` (what Triton's ``simple_http_model_control.py`` calls) and plain HTTP:
``POST /v2/repository/index`` (body ``{"ready": bool}``), ``POST
/v2/repository/models/{m}/load`` (Triton's ``parameters.config``) and ``.../unload``. Loading and
unloading obey the model-control rule: refused on the inference listener (403, naming the
management API) unless the server runs with ``--model-control inference``."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import numpy as np
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
from conftest import TEST_MODELS, Server, run_server
from e2e_helpers import PATIENCE
from grpc_helpers import target

from podium.server.http import INFERENCE_ROUTES

TRITON_MODELS = TEST_MODELS / "triton"
NAMES = ["accumulator", "batched", "identity", "simple", "words"]


@pytest.fixture(scope="module")
def opened() -> Iterator[Server]:
    """``--model-control inference``: Triton's explicit model control, on the inference port."""
    with run_server(TRITON_MODELS, args=("--model-control", "inference")) as server:
        yield server


@pytest.fixture(scope="module")
def default() -> Iterator[Server]:
    with run_server(TRITON_MODELS) as server:
        yield server


def http_client(server: Server) -> thttp.InferenceServerClient:
    return thttp.InferenceServerClient(server.url.split("://", 1)[1].rstrip("/"))


def failure(call) -> thttp.InferenceServerException:  # type: ignore[no-untyped-def]
    with pytest.raises(thttp.InferenceServerException) as caught:
        call()
    return caught.value


def test_the_index_lists_every_version_as_triton_does(opened: Server) -> None:
    index = http_client(opened).get_model_repository_index()
    assert [entry["name"] for entry in index] == NAMES
    # Triton's fields; no reason while ready; an unversioned model is version "1", as Triton's.
    assert index[3] == {"name": "simple", "version": "1", "state": "READY"}
    r = httpx.post(f"{opened.url}/v2/repository/index", json={"ready": True}, timeout=PATIENCE)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert [entry["name"] for entry in r.json()] == NAMES
    # An empty body is an empty request, as tritonclient sends it.
    assert httpx.post(f"{opened.url}/v2/repository/index", timeout=PATIENCE).json() == index


def test_unload_and_load_with_tritonclient(opened: Server) -> None:
    client = http_client(opened)
    client.unload_model("simple")
    assert not client.is_model_ready("simple")
    unloaded = {e["name"]: e for e in client.get_model_repository_index()}["simple"]
    assert unloaded == {
        "name": "simple",
        "version": "1",
        "state": "UNAVAILABLE",
        "reason": "unloaded on request",
    }
    ready_only = httpx.post(f"{opened.url}/v2/repository/index", json={"ready": True})
    assert "simple" not in [e["name"] for e in ready_only.json()]
    client.load_model("simple")
    assert client.is_model_ready("simple")
    # Triton's answers: 200 with nothing in the body.
    for action in ("unload", "load"):
        r = httpx.post(f"{opened.url}/v2/repository/models/simple/{action}", timeout=PATIENCE)
        assert (r.status_code, r.content) == (200, b""), r.text
    assert client.is_model_ready("simple")


def test_a_load_config_changes_max_batch_size_until_a_plain_load(opened: Server) -> None:
    client = http_client(opened)
    grpc_client = tgrpc.InferenceServerClient(target(opened))
    # As simple_http_model_control.py: first a config that is not JSON, then a good one.
    error = failure(
        lambda: client.load_model(
            "simple", config='"parameters": {"config": {{"max_batch_size": "16"}}}'
        )
    )
    assert error.status() == "400" and "failed to load" in error.message()
    assert client.get_model_config("simple")["max_batch_size"] == 8
    client.load_model("simple", config='{"max_batch_size":"16"}')
    assert client.get_model_config("simple")["max_batch_size"] == 16
    assert grpc_client.get_model_config("simple").config.max_batch_size == 16
    assert client.is_model_ready("simple")
    # A batch of 16 rows is now within the declared bound.
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = thttp.InferInput(name, [16, 16], "INT32")
        tensor.set_data_from_numpy(np.ones((16, 16), dtype=np.int32))
        inputs.append(tensor)
    assert client.infer("simple", inputs).as_numpy("OUTPUT0").sum() == 2 * 256
    client.load_model("simple")  # Triton reads its repository again: the config as found
    assert client.get_model_config("simple")["max_batch_size"] == 8


def test_load_and_unload_errors(opened: Server) -> None:
    client = http_client(opened)
    error = failure(lambda: client.load_model("wrong_model_name"))
    assert error.status() == "404"
    assert "failed to load" in error.message() and "'wrong_model_name'" in error.message()
    error = failure(lambda: client.unload_model("wrong_model_name"))
    assert (
        error.status() == "404"
        and "Request for unknown model: 'wrong_model_name' is not found" in error.message()
    )
    error = failure(
        lambda: client.load_model("simple", config='{"instance_group": [{"count": 4}]}')
    )
    assert (
        error.status() == "400"
        and "workers are scaled through the management API" in error.message()
    )
    url = f"{opened.url}/v2/repository/models/simple/load"
    for body, words in [
        ({"parameters": {"file:1/model.py": "cHJpbnQoKQ=="}}, "file:1/model.py"),
        ({"parameters": {"colour": "red"}}, "unknown parameter(s) colour"),
        ({"parameters": {"config": {"max_batch_size": 4}}}, "'config' must be a string"),
        ({"parameters": [1]}, "'parameters' of a repository load request must be a JSON object"),
        ([1], "must be a JSON object, got an array"),
    ]:
        r = httpx.post(url, json=body, timeout=PATIENCE)
        assert r.status_code == 400 and words in r.json()["error"], r.text
    r = httpx.post(url, content=b"{not json", timeout=PATIENCE)
    assert r.status_code == 400 and "malformed JSON body" in r.json()["error"]
    unload = f"{opened.url}/v2/repository/models/simple/unload"
    r = httpx.post(unload, json={"parameters": {"unload_dependents": "yes"}}, timeout=PATIENCE)
    assert r.status_code == 400 and "'unload_dependents' must be true or false" in r.text
    r = httpx.post(f"{opened.url}/v2/repository/index", json={"ready": "yes"}, timeout=PATIENCE)
    assert r.status_code == 400 and "'ready'" in r.json()["error"]
    r = httpx.get(f"{opened.url}/v2/repository/index", timeout=PATIENCE)
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    assert (
        client.is_model_ready("simple") and client.get_model_config("simple")["max_batch_size"] == 8
    )


def test_the_inference_listener_refuses_to_load_and_unload_by_default(default: Server) -> None:
    client = http_client(default)
    for call, action in [
        (lambda: client.unload_model("simple"), "unloading model 'simple'"),
        (lambda: client.load_model("simple"), "loading model 'simple'"),
        (lambda: client.load_model("simple", config="{not json"), "loading model 'simple'"),
        (lambda: client.load_model("nope"), "loading model 'nope'"),  # no 404: no probing
    ]:
        error = failure(call)
        assert error.status() == "403", error.message()
        assert action in error.message()
        assert "is refused on the inference listener (oip_rest)" in error.message()
        assert default.management_url in error.message()  # where model control is
        assert "--model-control inference" in error.message()
    assert client.is_model_ready("simple")
    assert len(client.get_model_repository_index()) == len(NAMES)  # reading is open


def test_the_routes_are_in_the_route_table() -> None:
    named = {route.name: (route.methods, route.path) for route in INFERENCE_ROUTES}
    assert named["repositoryIndex"] == (("POST",), "/v2/repository/index")
    assert named["repositoryModelLoad"] == (("POST",), "/v2/repository/models/{model}/load")
    assert named["repositoryModelUnload"] == (("POST",), "/v2/repository/models/{model}/unload")
