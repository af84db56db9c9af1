"""Truss's routes end to end, against real servers: GET /v1/models/{m} and POST
/v1/models/{m}:predict with several models (the name picks one), and every route of a server of
one model (any name reaches it): errors in Truss's shape, MessagePack, streams, WebSockets.
Truss's other capabilities (streams decided per call, the OpenAI-style methods, WebSocket models,
health checks, schemas) over fake instances: test_http_truss_unit.py.

The protocol table's Truss column (input forms, output encodings, starlette responses) is in
test_http_mapping.py; Truss streaming (chunks, first chunk before the generator ends, errors
after the first chunk) in test_http_streaming.py; not ready (503) in test_http_readiness.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import msgpack
import msgpack_numpy
import numpy as np
import pytest
from conftest import TEST_MODELS, Server, run_server
from e2e_helpers import PATIENCE, info

pytest_plugins = ["e2e_fixtures"]


@pytest.mark.anyio
async def test_model_route_reports_ready(client: httpx.AsyncClient) -> None:
    # Truss's answer: 200 {} (several models are served here: the name picks one).
    r = await client.get("/v1/models/emit")
    assert (r.status_code, r.content) == (200, b"{}")
    r = await client.get("/v1/models/versioned")
    assert (r.status_code, r.json()) == (200, {})
    r = await client.get("/v1/models/ghost")
    assert r.status_code == 404
    assert "'ghost'" in r.json()["error"]
    assert r.headers["x-baseten-error-source"] == "04"
    assert r.headers["x-baseten-error-code"] == "700"


@pytest.mark.anyio
async def test_predict_json_in_json_out(client: httpx.AsyncClient) -> None:
    body = {"text": "hi", "n": [1, 2.5], "nested": {"ok": True}}
    r = await client.post("/v1/models/probe:predict", json=body)
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    assert info(r.json()) == {
        "dict": {
            "text": {"str": "hi"},
            "n": {"list": [{"int": 1}, {"float": 2.5}]},
            "nested": {"dict": {"ok": {"bool": True}}},
        }
    }


@pytest.mark.anyio
async def test_predict_reaches_the_default_version(client: httpx.AsyncClient) -> None:
    # Truss has no version in its routes: a versioned model answers with its default (highest).
    r = await client.post("/v1/models/versioned:predict", json={})
    assert (r.status_code, r.json()) == (200, {"version": "10"})


@pytest.mark.anyio
async def test_predict_body_is_json_whatever_the_content_type(client: httpx.AsyncClient) -> None:
    r = await client.post(
        "/v1/models/probe:predict", content=b"[1]", headers={"content-type": "text/plain"}
    )
    assert r.status_code == 200
    assert info(r.json()) == {"list": [{"int": 1}]}


@pytest.mark.anyio
async def test_request_body_readable_after_polling_is_disconnected(
    client: httpx.AsyncClient,
) -> None:
    body = b'{"a": [1, 2, 3]}'
    r = await client.post("/v1/models/poll-then-body:predict", content=body, timeout=10)
    assert r.status_code == 200, r.text
    assert r.json() == {"still_there": True, "raw_length": len(body), "same": True}


# -- a server of one model: Truss's routes ignore the name ----------------------------------------

ONE = TEST_MODELS / "truss-one"
ONE_STREAM = TEST_MODELS / "truss-one-stream"
MODEL_ERROR = "Internal Server Error (in model/chainlet)."
OCTETS = {"content-type": "application/octet-stream"}


@pytest.fixture(scope="module")
def one() -> Iterator[Server]:
    with run_server(ONE) as server:
        yield server


@pytest.fixture(scope="module")
def one_stream() -> Iterator[Server]:
    with run_server(ONE_STREAM) as server:
        yield server


def baseten(r: httpx.Response, code: str) -> None:
    assert r.headers["x-baseten-error-source"] == "04"
    assert r.headers["x-baseten-error-code"] == code


def test_one_model_answers_every_truss_route(one: Server) -> None:
    with httpx.Client(base_url=one.url, timeout=PATIENCE) as client:
        r = client.get("/")
        assert (r.status_code, r.content) == (200, b"true")
        for name in ("speaker", "model"):
            assert client.get(f"/v1/models/{name}").content == b"{}"
            assert client.get(f"/v1/models/{name}/loaded").content == b"{}"
            r = client.post(f"/v1/models/{name}:predict", json={"a": [1, 2]})
            assert (r.status_code, r.json()) == (200, {"a": [1, 2]})
        r = client.get("/v1/models/model/schema")  # a native model says nothing of its schema
        assert (r.status_code, r.json()) == (404, {"error": "No schema found"})
        baseten(r, "600")
        r = client.post("/invocations", json={"sagemaker": 1})
        assert (r.status_code, r.json()) == (200, {"sagemaker": 1})
        r = client.options("/")  # TorchServe's API description stays
        assert r.status_code == 200 and r.json()["openapi"].startswith("3.1")
        r = client.get("/ping")  # TorchServe's answer (Truss's: 200 {})
        assert (r.status_code, r.json()) == (200, {"status": "Healthy"})


def test_errors_in_truss_shape(one: Server) -> None:
    with httpx.Client(base_url=one.url, timeout=PATIENCE) as client:
        r = client.post("/v1/models/model:predict", json={"kind": "http"})
        assert (r.status_code, r.json()) == (418, {"error": "I am a teapot"})
        baseten(r, "600")
        r = client.post("/v1/models/model:predict", json={"kind": "http-dict"})
        assert (r.status_code, r.json()) == (422, {"error": {"field": "x", "why": "odd"}})
        baseten(r, "600")
        r = client.post("/v1/models/model:predict", json={"kind": "fail"})
        assert (r.status_code, r.json()) == (500, {"error": MODEL_ERROR})
        baseten(r, "600")
        r = client.post("/v1/models/model:predict", json={"kind": "object"})
        message = "Unhandled exception: TypeError: Object of type object is not JSON serializable"
        assert (r.status_code, r.json()) == (500, {"error": message})
        baseten(r, "500")
        r = client.post("/v1/models/model:predict", content=b"[1,")
        assert r.status_code == 400
        assert r.json()["error"].startswith("Invalid JSON payload: Expecting value")
        baseten(r, "700")
        r = client.post("/v1/models/model:predict_binary", content=b"\x91", headers=OCTETS)
        assert r.status_code == 400
        assert r.json()["error"].startswith("Invalid msgpack payload: ")
        baseten(r, "700")
        r = client.post("/v1/models/model:predict", json={"kind": "conflict"})
        assert (r.status_code, r.json()) == (409, {"why": "taken"})
        baseten(r, "700")
        for path in ("/v1/chat/completions", "/v1/embeddings"):  # no model defines them
            r = client.post(path, json={"model": "speaker"})
            assert r.status_code == 404 and "must only be called if model has it" in r.text
            baseten(r, "700")
    assert "the secret reason" in one.log  # logged, not told


def test_msgpack_round_trip_with_numpy(one: Server) -> None:
    x = np.linspace(0, 1, 5, dtype=np.float32)
    body = msgpack.packb({"kind": "array", "x": x}, default=msgpack_numpy.encode)
    for verb in ("predict", "predict_binary"):
        r = httpx.post(
            f"{one.url}/v1/models/model:{verb}", content=body, headers=OCTETS, timeout=PATIENCE
        )
        assert r.status_code == 200, r.text
        assert r.headers["content-type"] == "application/octet-stream"
        answer = msgpack.unpackb(r.content, object_hook=msgpack_numpy.decode)
        np.testing.assert_array_equal(answer["array"], [[0, 1], [2, 3]])
        assert answer["array"].dtype == np.int64
        np.testing.assert_array_equal(answer["x"], x)
        assert answer["x"].dtype == np.float32


@pytest.mark.anyio
async def test_websocket_with_no_model_serving_it_closes_1003(one: Server) -> None:
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    url = one.url.replace("http://", "ws://")
    for path in ("/v1/websocket", "/v1/models/model/websocket"):
        async with connect(url + path) as ws:
            with pytest.raises(ConnectionClosed) as closed:
                await ws.recv()
        assert closed.value.rcvd is not None
        assert closed.value.rcvd.code == 1003
        assert closed.value.rcvd.reason == "WebSocket is not implemented on this deployment."
    # The listener still answers plain requests on new connections.
    async with httpx.AsyncClient(base_url=one.url, timeout=PATIENCE) as client:
        assert (await client.get("/")).content == b"true"


def test_streams_chunks_gathers_and_ends(one_stream: Server) -> None:
    url = f"{one_stream.url}/v1/models/model:predict"
    with httpx.Client(timeout=PATIENCE) as client:
        with client.stream("POST", url, json={}) as r:
            assert r.headers["content-type"] == "application/octet-stream"
            assert r.headers["transfer-encoding"] == "chunked"
            assert r.read() == b"one two three"
        r = client.post(url, json={}, headers={"accept": "application/json"})
        assert (r.headers["content-type"], r.json()) == ("application/json", "one two three")
        openai = {"accept": "application/json", "user-agent": "OpenAI/Python 1.61.0"}
        r = client.post(url, json={}, headers=openai)
        assert (r.headers["content-type"], r.content) == (
            "application/octet-stream",
            b"one two three",
        )
        r = client.post(url, json={"fail": True})  # ends where it broke, as Truss's server
        assert (r.status_code, r.content) == (200, b"one two ")
    deadline = time.monotonic() + 10  # the server's log reaches us on its own thread
    while "the stream broke" not in one_stream.log and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "the stream broke" in one_stream.log


# -- a real truss (the truss adapter): its methods, WebSocket and health check --------------------


@pytest.fixture(scope="module")
def talker() -> Iterator[Server]:
    with run_server(TEST_MODELS / "trusses-http") as server:  # talker and socket
        yield server


def test_a_truss_streams_by_its_returned_value(talker: Server) -> None:
    url = f"{talker.url}/v1/models/talker:predict"
    with httpx.Client(timeout=PATIENCE) as client:
        r = client.post(url, json={"a": 1})
        assert (r.status_code, r.json()) == (200, {"echo": {"a": 1}})
        r = client.post(url, json={"stream": True, "text": "a b"})
        assert (r.headers["content-type"], r.content) == ("application/octet-stream", b"a b ")
        r = client.post(
            url, json={"stream": True, "text": "a b"}, headers={"accept": "application/json"}
        )
        assert r.json() == "a b "
        r = client.post(url, json={"teapot": True})
        assert (r.status_code, r.json()) == (418, {"error": "short and stout"})
        baseten(r, "600")


def test_a_truss_method_on_its_openai_route(talker: Server) -> None:
    with httpx.Client(base_url=talker.url, timeout=PATIENCE) as client:
        r = client.post("/v1/chat/completions", json={"model": "x", "messages": []})
        assert r.json() == {"choices": [{"message": {"content": "hello there"}}]}
        openai = {"accept": "application/json", "user-agent": "OpenAI/Python 1.61.0"}
        r = client.post("/v1/chat/completions", json={"stream": True}, headers=openai)
        assert r.content == b"data: hello\n\ndata: there\n\n"
        r = client.post("/v1/embeddings", json={})
        assert r.status_code == 404
        baseten(r, "700")


@pytest.mark.anyio
async def test_a_truss_websocket_echoes(talker: Server) -> None:
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    url = talker.url.replace("http://", "ws://")
    # /v1/websocket: the one model that serves WebSockets, among others
    for path in ("/v1/websocket", "/v1/models/socket/websocket"):
        async with connect(url + path) as ws:
            await ws.send("hi")
            assert await ws.recv() == "echo hi"
            await ws.send("bye")
            with pytest.raises(ConnectionClosed) as closed:
                await ws.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000


def test_readiness_follows_a_truss_health_check(talker: Server) -> None:
    # Last in this module: the model says it is unhealthy from now on.
    with httpx.Client(base_url=talker.url, timeout=PATIENCE) as client:
        assert client.get("/v1/models/talker").content == b"{}"
        assert client.post("/v1/models/talker:predict", json={"unhealthy": True}).status_code == 200
        r = client.get("/v1/models/talker")
        assert (r.status_code, r.json()) == (503, {"error": "Model with name talker is not ready."})
        baseten(r, "600")
        assert client.get("/v1/models/talker/loaded").status_code == 200


@pytest.mark.anyio
async def test_websockets_count_against_max_connections() -> None:
    """An upgraded connection stays counted until it closes: WebSockets cannot pile up past
    --max-connections on a listener exposed to a network."""
    from websockets.asyncio.client import connect

    with run_server(TEST_MODELS / "trusses-http" / "socket", args=("--max-connections", "2")) as s:
        url = s.url.replace("http://", "ws://") + "/v1/websocket"
        async with connect(url) as first, connect(url) as second:
            for ws in (first, second):
                await ws.send("hi")
                assert await ws.recv() == "echo hi"
            async with httpx.AsyncClient(base_url=s.url, timeout=PATIENCE) as client:
                r = await client.get("/v1/models/socket/loaded")
                assert r.status_code == 503 and "connections open" in r.text
        deadline = time.monotonic() + 10  # both closed: room again
        while True:
            async with httpx.AsyncClient(base_url=s.url, timeout=PATIENCE) as client:
                r = await client.get("/v1/models/socket/loaded")
            if r.status_code == 200 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        assert r.status_code == 200
