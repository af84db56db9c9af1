"""Bad requests end to end: each gets its status and ``{"error": "<message>"}``, and the next good
request on the same server still succeeds."""

from __future__ import annotations

import json

import anyio
import httpx
import pytest
from conftest import Server
from e2e_helpers import MAX_REQUEST_SIZE, EventLog, Gates, RawHttp, outputs_by_name, tensor, text

pytest_plugins = ["e2e_fixtures"]

GOOD_OIP = {"inputs": [text("kind", "number")]}


async def still_serving(client: httpx.AsyncClient) -> None:
    r = await client.post("/v2/models/emit/infer", json=GOOD_OIP)
    assert r.status_code == 200, r.text
    assert outputs_by_name(r.json())["output"]["data"] == [42]
    r = await client.post("/v1/models/emit:predict", json={"kind": "number"})
    assert (r.status_code, r.json()) == (200, 42)


def error_of(r: httpx.Response, status: int) -> str:
    """The error's message; TorchServe's routes answer in TorchServe's shape (issue 12, item
    19), every other route with ``{"error": ...}``."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    return message_of(r.request.url.path, r.json(), status)


def message_of(path: str, body: dict, status: int) -> str:
    if path.startswith("/predictions"):
        assert set(body) == {"code", "type", "message"}, body
        assert body["code"] == status and body["type"].endswith("Exception"), body
        message = body["message"]
    else:
        assert set(body) == {"error"}, body
        message = body["error"]
    assert isinstance(message, str) and message
    return message


JSON_ROUTES = [
    "/v2/models/emit/infer",
    "/v2/models/emit/infer_stream",
    "/v2/models/emit/generate",
    "/v2/models/emit/generate_stream",
    "/v1/models/emit:predict",
    "/predictions/emit",
]


@pytest.mark.anyio
@pytest.mark.parametrize("path", JSON_ROUTES)
@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b'{"inputs": [', "malformed JSON"),
        (b"{'single': 'quotes'}", "malformed JSON"),
        (b"", "empty"),
    ],
)
async def test_malformed_or_empty_json_is_400(
    client: httpx.AsyncClient, path: str, body: bytes, words: str
) -> None:
    r = await client.post(path, content=body, headers={"content-type": "application/json"})
    if path.startswith("/v1/models/"):  # Truss's words: Python's json module's description
        words = "Invalid JSON payload: Expecting"
    assert words in error_of(r, 400)
    await still_serving(client)


@pytest.mark.anyio
@pytest.mark.parametrize("path", JSON_ROUTES)
@pytest.mark.parametrize(
    ("body", "words"),
    [
        # Bytes that are not UTF-8 inside a string: msgspec raises UnicodeDecodeError (was a 500
        # with a traceback in the log).
        (b'{"id": "num\xffber", "inputs": []}', "invalid UTF-8: byte 0xff at offset 11"),
        (b'{"inputs": [], "id": "\xc3("}', "invalid UTF-8: byte 0xc3 at offset 22"),
        # Half a surrogate pair (msgspec says "Input data was truncated").
        (rb'{"kind": "\ud800"}', r"lone UTF-16 surrogate escape '\ud800' at offset 10"),
        (rb'{"kind": "\udc00x", "n": 1}', r"lone UTF-16 surrogate escape '\udc00' at offset 10"),
    ],
)
async def test_json_text_that_is_not_unicode_is_400_naming_the_fault(
    client: httpx.AsyncClient, models_server: Server, path: str, body: bytes, words: str
) -> None:
    r = await client.post(path, content=body, headers={"content-type": "application/json"})
    error = error_of(r, 400)
    assert words in error and "truncated" not in error
    assert "UnicodeDecodeError" not in models_server.log
    await still_serving(client)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v2/models/emit/infer", [1, 2]),
        ("/v2/models/emit/infer", "a string"),
        ("/v2/models/emit/generate", [1, 2]),
        ("/v2/models/emit/generate_stream", 7),
        ("/v1/models/probe-oip:predict", [1, 2]),
        ("/predictions/probe-oip", "a string"),
    ],
)
async def test_non_object_body_is_400(client: httpx.AsyncClient, path: str, body: object) -> None:
    error_of(await client.post(path, json=body), 400)
    await still_serving(client)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"inputs": "x"}, "inputs"),
        ({"inputs": [{"name": 1, "shape": [1], "datatype": "INT8", "data": [1]}]}, "name"),
        ({"inputs": [{"name": "x", "shape": "1", "datatype": "INT8", "data": [1]}]}, "shape"),
        ({"inputs": [{"name": "x", "shape": [1], "data": [1]}]}, "datatype"),
        ({"inputs": [tensor("x", "INT8", [1], [1])], "id": 5}, "id"),
        ({"inputs": [tensor("x", "INT8", [1], [1])], "outputs": {"name": "x"}}, "outputs"),
        ({"inputs": [tensor("x", "INT8", [-1], [1])]}, "shape"),
        ({"id": "no inputs"}, "inputs"),
    ],
)
async def test_wrong_field_types_are_400(client: httpx.AsyncClient, body: dict, words: str) -> None:
    message = error_of(await client.post("/v2/models/tensors/infer", json=body), 400)
    assert words in message
    await still_serving(client)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v2/models/ghost"),
        ("GET", "/v2/models/ghost/ready"),
        ("POST", "/v2/models/ghost/infer"),
        ("POST", "/v2/models/ghost/generate_stream"),
        ("GET", "/v1/models/ghost"),
        ("POST", "/v1/models/ghost:predict"),
        ("POST", "/predictions/ghost"),
        ("POST", "/predictions/ghost/1"),
    ],
)
async def test_unknown_model_is_404_naming_it(
    client: httpx.AsyncClient, method: str, path: str
) -> None:
    r = await client.request(method, path, json=GOOD_OIP if method == "POST" else None)
    assert "'ghost'" in error_of(r, 404)
    await still_serving(client)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v2/models/versioned/versions/3"),
        ("POST", "/v2/models/versioned/versions/3/infer"),
        ("POST", "/predictions/versioned/3"),
    ],
)
async def test_unknown_version_is_404_naming_model_and_version(
    client: httpx.AsyncClient, method: str, path: str
) -> None:
    r = await client.request(method, path, json=GOOD_OIP if method == "POST" else None)
    message = error_of(r, 404)
    assert "'versioned' version 3 is not found" in message
    await still_serving(client)


@pytest.mark.anyio
@pytest.mark.parametrize(
    "path", ["/v2/models/emit/infer", "/v1/models/emit:predict", "/predictions/emit"]
)
async def test_body_over_max_request_size_is_413(models_server: Server, path: str) -> None:
    too_big = b'{"kind": "' + b"x" * MAX_REQUEST_SIZE + b'"}'
    for body in (too_big, [too_big[: len(too_big) // 2], too_big[len(too_big) // 2 :]]):
        raw = await RawHttp.connect(models_server.url)
        try:
            # Content-Length declared (refused before reading), then a chunked body (counted).
            await raw.send("POST", path, body, {"content-type": "application/json"})
            status, headers = await raw.head()
            answer = json.loads(await raw.body(headers))
        finally:
            await raw.close()
        assert status == 413
        assert str(MAX_REQUEST_SIZE) in message_of(path, answer, 413)
    async with httpx.AsyncClient(base_url=models_server.url) as client:
        await still_serving(client)


@pytest.mark.anyio
async def test_body_over_max_request_size_is_413_for_a_model_reading_it_itself(
    models_server: Server,
) -> None:
    # The rawbody model takes only the request and reads the body itself: the limit still holds.
    too_big = b"x" * (MAX_REQUEST_SIZE + 1)
    for body in (too_big, [too_big[:1000], too_big[1000:]]):
        raw = await RawHttp.connect(models_server.url)
        try:
            await raw.send("POST", "/v1/models/rawbody:predict", body)
            status, headers = await raw.head()
            answer = json.loads(await raw.body(headers))
        finally:
            await raw.close()
        assert status == 413
        assert str(MAX_REQUEST_SIZE) in answer["error"]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v2/models/failing/infer"),
        ("POST", "/v2/models/failing/generate_stream"),
        ("POST", "/v1/models/failing:predict"),
        ("POST", "/predictions/failing"),
    ],
)
async def test_model_not_ready_is_503_with_the_reason(
    failing_server: Server, method: str, path: str
) -> None:
    async with httpx.AsyncClient(base_url=failing_server.url) as client:
        r = await client.request(method, path, json=GOOD_OIP)
        message = error_of(r, 503)
        if path.startswith("/v1/models/"):  # Truss's words, then Podium's reason
            assert message.startswith("Model with name failing is not ready. ")
        else:
            assert "'failing'" in message
        assert "the weights file is missing (on purpose)" in message
        r = await client.post("/v1/models/fine:predict", json={})
        assert (r.status_code, r.json()) == (200, {"fine": True})


@pytest.mark.anyio
async def test_queue_full_is_503_and_the_queue_drains(
    client: httpx.AsyncClient, events: EventLog, gates: Gates, tag: str
) -> None:
    # gated: one slot, one waiting place. First holds the slot, second waits, third is refused.
    gate = gates.new()
    async with anyio.create_task_group() as tg:
        answers: dict[str, httpx.Response] = {}

        async def call(name: str, with_gate: bool) -> None:
            body = {"tag": f"{tag}-{name}", **({"gate": gate} if with_gate else {})}
            answers[name] = await client.post("/v1/models/gated:predict", json=body)

        tg.start_soon(call, "first", True)
        await events.wait_for(f"{tag}-first", "predict-start")
        tg.start_soon(call, "second", False)
        await events.wait_for(f"{tag}-second", "preprocess")
        third = await client.post("/v1/models/gated:predict", json={"tag": f"{tag}-third"})
        message = error_of(third, 503)
        assert "'gated'" in message and "queue is full" in message
        assert "predict-start" not in events.names(f"{tag}-second")
        gates.open(gate)
    assert answers["first"].json() == {"tag": f"{tag}-first"}
    assert answers["second"].json() == {"tag": f"{tag}-second"}
    assert events.names(f"{tag}-third") == ["preprocess"]
    r = await client.post("/v1/models/gated:predict", json={"tag": f"{tag}-fourth"})
    assert r.status_code == 200


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/models/raiser:predict", {"why": "too cold"}),
        ("/predictions/raiser", {"why": "too cold"}),
        ("/v2/models/raiser/infer", {"inputs": [text("why", "too cold")]}),
        ("/v2/models/raiser/generate", {"why": "too cold"}),
        ("/v2/models/raiser/infer_stream", {"inputs": [text("why", "too cold")]}),
    ],
)
async def test_model_raised_is_500_with_the_message(
    client: httpx.AsyncClient, path: str, body: dict
) -> None:
    message = error_of(await client.post(path, json=body), 500)
    if path.startswith("/v1/models/"):  # Truss's answer names no detail of the model's code
        assert message == "Internal Server Error (in model/chainlet)."
    else:
        assert "'raiser'" in message
        assert "ValueError" in message and "the model refused" in message
        assert "too cold" in message
    await still_serving(client)


DEEP = 100_000


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v2/models/tensors/infer", b"[" * DEEP + b"]" * DEEP),
        (
            "/v2/models/tensors/infer",
            b'{"inputs": [{"name": "x", "shape": [1], "datatype": "INT8", "data": '
            + b"[" * DEEP
            + b"]" * DEEP
            + b"}]}",
        ),
        ("/v2/models/probe/generate", b'{"a": ' + b"[" * DEEP + b"]" * DEEP + b"}"),
        ("/v1/models/probe:predict", b"[" * DEEP + b"]" * DEEP),
        ("/predictions/probe", b'{"a": ' + b"[" * DEEP + b"]" * DEEP + b"}"),
    ],
)
async def test_json_nested_too_deep_is_400(
    client: httpx.AsyncClient, path: str, body: bytes
) -> None:
    r = await client.post(path, content=body, headers={"content-type": "application/json"})
    error_of(r, 400)
    await still_serving(client)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("GET", "/v2/models/emit/infer", "POST"),
        ("PUT", "/v2/models/emit/generate_stream", "POST"),
        ("POST", "/v2", "GET, HEAD"),
        ("POST", "/v2/health/live", "GET, HEAD"),
        ("DELETE", "/v2/health/ready", "GET, HEAD"),
        ("POST", "/v2/models/emit", "GET, HEAD"),
        ("POST", "/v2/models/versioned/versions/1/ready", "GET, HEAD"),
        ("GET", "/v1/models/emit:predict", "POST"),
        ("POST", "/v1/models/emit", "GET, HEAD"),
        ("DELETE", "/predictions/emit", "POST, PUT, GET, HEAD"),
        ("PUT", "/ping", "GET, POST, HEAD"),
    ],
)
async def test_wrong_method_is_405_with_allow(
    client: httpx.AsyncClient, method: str, path: str, allow: str
) -> None:
    r = await client.request(method, path)
    message = error_of(r, 405)
    assert method in message
    assert r.headers["allow"] == allow
    await still_serving(client)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/nope"),
        ("GET", "/v2/nope"),
        ("GET", "/v2/health"),
        ("POST", "/v2/models/emit/explain"),
        ("POST", "/v2/models/emit/versions/1/infer/more"),
        ("POST", "/v1/models/emit:explain"),
        ("GET", "/v1/models/emit/other"),
        ("POST", "/predictions"),
        ("POST", "/predictions/emit/1//extra"),
    ],
)
async def test_unknown_route_is_404(client: httpx.AsyncClient, method: str, path: str) -> None:
    message = error_of(await client.request(method, path), 404)
    assert path in message
    await still_serving(client)


@pytest.mark.anyio
async def test_head_is_served_where_get_is(client: httpx.AsyncClient) -> None:
    for path in ("/v2", "/v2/health/live", "/v2/health/ready", "/ping", "/v2/models/emit"):
        r = await client.head(path)
        assert r.status_code == 200, path
        assert r.content == b""
