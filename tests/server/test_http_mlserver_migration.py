"""Issue 22's MLServer items end to end: a real `podium serve` of an MLServer runtime written as
MLServer's users write them, reached as MLServer's own examples reach it (httpx, gRPC).

- a BYTES input whose shape counts the characters (or bytes) of its one text;
- imports from MLServer's public modules that Podium provides without MLServer;
- ``@custom_handler`` REST endpoints on the HTTP inference port;
- model metadata and repository index as MLServer answers them.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import AsyncIterator, Iterator
from types import SimpleNamespace

import grpc
import httpx
import pytest
from conftest import TEST_MODELS, Server, run_server
from grpc_helpers import Stubs, target

pytest_plugins = ["e2e_fixtures", "grpc_fixtures"]

MIGRATION = TEST_MODELS / "mlserver-migration"
NATIVE_PROBE = TEST_MODELS / "serve" / "probe"
HELLO = {"name": "Foo Bar", "message": "Hello from Client (REST)!"}


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with run_server(MIGRATION, NATIVE_PROBE) as running:
        yield running


@pytest.fixture
async def client(server: Server) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as c:
        yield c


def echo_of(body: dict) -> dict:
    (output,) = body["outputs"]
    assert output["name"] == "echo_response"
    return json.loads(output["data"][0])


# -- BYTES shapes that count characters ------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    "text", [json.dumps(HELLO), json.dumps({"name": "Zoë"}, ensure_ascii=False)]
)
@pytest.mark.parametrize("counted", ["characters", "utf-8 bytes"])
async def test_a_shape_counting_the_characters_of_one_text_is_accepted(
    client: httpx.AsyncClient, text: str, counted: str
) -> None:
    # MLServer's custom-json example: "shape": [len(inputs_string)]
    length = len(text) if counted == "characters" else len(text.encode())
    body = {
        "inputs": [{"name": "echo_request", "shape": [length], "datatype": "BYTES", "data": [text]}]
    }
    response = await client.post("/v2/models/json-hello/infer", json=body)
    assert response.status_code == 200, response.text
    echo = echo_of(response.json())
    assert echo["request"] == json.loads(text)
    # the runtime sees the request as the client sent it, as MLServer passes it on
    assert echo["seen"] == {"name": "echo_request", "shape": [length], "datatype": "BYTES"}


@pytest.mark.anyio
async def test_a_bare_text_with_its_length_as_shape_is_accepted(client: httpx.AsyncClient) -> None:
    text = json.dumps(HELLO)
    body = {
        "inputs": [
            {"name": "echo_request", "shape": [len(text)], "datatype": "BYTES", "data": text}
        ]
    }
    response = await client.post("/v2/models/json-hello/infer", json=body)
    assert response.status_code == 200, response.text
    assert echo_of(response.json())["request"] == HELLO


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("shape", "data"),
    [
        ([7], ["abc"]),  # neither its characters nor its bytes
        ([3], ["abc", "def"]),  # two elements: the shape counts elements
        ([3], [1]),  # not a text
        ([2, 3], ["abc"]),
    ],
)
async def test_other_wrong_shapes_stay_400s(
    client: httpx.AsyncClient, shape: list[int], data: list
) -> None:
    body = {"inputs": [{"name": "echo_request", "shape": shape, "datatype": "BYTES", "data": data}]}
    response = await client.post("/v2/models/json-hello/infer", json=body)
    assert response.status_code == 400, response.text
    assert "echo_request" in response.json()["error"]


@pytest.mark.anyio
async def test_a_native_model_still_refuses_a_shape_counting_characters(
    client: httpx.AsyncClient,
) -> None:
    body = {"inputs": [{"name": "text", "shape": [5], "datatype": "BYTES", "data": ["hello"]}]}
    response = await client.post("/v2/models/probe/infer", json=body)
    assert response.status_code == 400
    assert response.json()["error"] == (
        "input 'text' has shape [5] (5 elements) but 1 data element"
    )


def test_a_shape_counting_bytes_over_grpc_is_accepted(server: Server, pb: SimpleNamespace) -> None:
    # MLServer's custom-json example over gRPC: shape=[len(inputs_bytes)], bytes_contents
    blob = json.dumps(HELLO).encode()
    request = pb.ModelInferRequest(model_name="json-hello")
    tensor = request.inputs.add(name="echo_request", datatype="BYTES", shape=[len(blob)])
    tensor.parameters["content_type"].string_param = "str"
    tensor.contents.bytes_contents.append(blob)
    with grpc.insecure_channel(target(server)) as channel:
        response = Stubs(channel, pb).ModelInfer(request, timeout=10)
    answer = json.loads(response.outputs[0].contents.bytes_contents[0])
    assert answer["request"] == HELLO
    assert answer["seen"]["shape"] == [len(blob)]


# -- @custom_handler endpoints -----------------------------------------------------------------


@pytest.mark.anyio
async def test_a_custom_handler_takes_the_json_body(client: httpx.AsyncClient) -> None:
    response = await client.post("/hello-sum", json=[1, 2, 3, 4])
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == 10


@pytest.mark.anyio
async def test_a_custom_handler_takes_a_gzip_body(client: httpx.AsyncClient) -> None:
    body = gzip.compress(json.dumps([1, 2, 3]).encode())
    headers = {"Content-Encoding": "gzip", "Content-Type": "application/json"}
    response = await client.post("/hello-sum", content=body, headers=headers)
    assert (response.status_code, response.json()) == (200, 6)


@pytest.mark.anyio
async def test_a_custom_handler_takes_path_and_query_parameters(
    client: httpx.AsyncClient,
) -> None:
    response = await client.get("/hello/world", params={"times": "2"})
    assert response.status_code == 200
    assert response.json() == {"greeting": "hello world hello world"}
    assert (await client.get("/hello/you")).json() == {"greeting": "hello you"}
    bad = await client.get("/hello/you", params={"times": "often"})
    assert bad.status_code == 400
    assert "times" in bad.json()["error"]


@pytest.mark.anyio
async def test_a_custom_handler_takes_and_returns_a_pydantic_model(
    client: httpx.AsyncClient,
) -> None:
    response = await client.post("/hello-model", json={"name": "you"})
    assert response.status_code == 200
    assert response.json() == {"name": "hello you", "punctuation": "!"}
    missing = await client.post("/hello-model", json={"punctuation": "?"})
    assert missing.status_code == 400
    assert "greeting" in missing.json()["error"]


@pytest.mark.anyio
async def test_a_custom_handler_gets_the_request_and_returns_a_response(
    client: httpx.AsyncClient,
) -> None:
    response = await client.put("/hello-request", content=b"raw bytes")
    assert response.status_code == 201
    assert response.headers["content-type"].startswith("text/plain")
    assert response.text == "PUT raw bytes"


@pytest.mark.anyio
async def test_a_custom_handler_is_served_for_its_method_only(client: httpx.AsyncClient) -> None:
    response = await client.get("/hello-sum")
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    assert (await client.post("/no-such-handler")).status_code == 404


@pytest.mark.anyio
async def test_a_custom_handlers_mlserver_error_keeps_its_status(
    client: httpx.AsyncClient,
) -> None:
    response = await client.post("/hello-fail")
    assert response.status_code == 400
    assert "no greeting today" in response.json()["error"]


# -- metadata as MLServer answers it -----------------------------------------------------------


@pytest.mark.anyio
async def test_metadata_answers_model_settings_versions_and_platform(
    client: httpx.AsyncClient,
) -> None:
    meta = (await client.get("/v2/models/json-hello")).json()
    assert meta["versions"] == ["json-hello/v0.1.0"]  # model-settings.json's, as MLServer
    assert meta["platform"] == "mlserver"
    assert meta["inputs"] == [{"name": "echo_request", "datatype": "BYTES", "shape": [-1]}]
    assert meta["parameters"]["content_type"] == "str"
    index = (await client.post("/v2/repository/index", json={})).json()
    assert {"name": "json-hello", "version": "v1", "state": "READY"}.items() <= next(
        e for e in index if e["name"] == "json-hello"
    ).items()
