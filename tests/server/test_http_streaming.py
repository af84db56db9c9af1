"""Streaming end to end: generate / generate_stream / infer_stream as SSE, Truss and TorchServe
chunked streams, and every cell of docs/protocols.md's streaming table.

The streamer models record each step in the event log, so "the client got the first item before
the generator finished" is checked by what the model had done at that moment, not by timing.
"""

from __future__ import annotations

import json

import httpx
import pytest
from conftest import Server
from e2e_helpers import EventLog, Gates, RawHttp, error_text, outputs_by_name, text
from httpx_sse import aconnect_sse

pytest_plugins = ["e2e_fixtures"]

STREAMERS = ["streamer", "streamer-sync"]  # async generator, sync generator
CHUNKED = ["/v1/models/{m}:predict", "/predictions/{m}"]  # Truss, TorchServe
QUESTION = "What is the capital of France?"
MLSERVER_REQUEST = {
    "inputs": [
        {
            "name": "prompt",
            "shape": [1],
            "datatype": "BYTES",
            "data": [QUESTION],
            "parameters": {"content_type": "str"},
        }
    ]
}


async def sse_items(client: httpx.AsyncClient, url: str, body: dict) -> list[dict]:
    async with aconnect_sse(client, "POST", url, json=body) as source:
        assert source.response.status_code == 200
        assert source.response.headers["content-type"].startswith("text/event-stream")
        return [json.loads(event.data) async for event in source.aiter_sse()]


# -- the examples: MLServer's streaming request and Triton's generate form -----------------------


@pytest.mark.anyio
@pytest.mark.parametrize("action", ["generate_stream", "infer_stream"])
async def test_mlserver_streaming_request_against_text_stream(
    examples_server: Server, action: str
) -> None:
    async with httpx.AsyncClient(base_url=examples_server.url, timeout=10) as client:
        items = await sse_items(client, f"/v2/models/text-stream/{action}", MLSERVER_REQUEST)
    pieces = []
    for item in items:
        assert item["model_name"] == "text-stream"
        (output,) = item["outputs"]
        assert (output["name"], output["datatype"], output["shape"]) == ("output", "BYTES", [1])
        pieces.extend(output["data"])
    assert pieces == ["What", " is", " the", " capital", " of", " France?"]
    assert "".join(pieces) == QUESTION


@pytest.mark.anyio
async def test_triton_generate_stream_against_text_stream(examples_server: Server) -> None:
    body = {"text_input": QUESTION, "parameters": {"max_tokens": 10}}
    async with httpx.AsyncClient(base_url=examples_server.url, timeout=10) as client:
        items = await sse_items(client, "/v2/models/text-stream/generate_stream", body)
    assert [set(item) for item in items] == [{"model_name", "text_output"}] * 6
    assert "".join(item["text_output"] for item in items) == QUESTION


@pytest.mark.anyio
async def test_generate_gathers_the_stream(examples_server: Server) -> None:
    # Streaming cell: generator × OIP generate: items gathered, outputs of one name
    # concatenated along the first axis.
    async with httpx.AsyncClient(base_url=examples_server.url, timeout=10) as client:
        r = await client.post("/v2/models/text-stream/generate", json=MLSERVER_REQUEST)
        assert r.status_code == 200, r.text
        (output,) = r.json()["outputs"]
        assert output["shape"] == [6]
        assert "".join(output["data"]) == QUESTION
        r = await client.post("/v2/models/text-stream/generate", json={"text_input": QUESTION})
        assert r.status_code == 200, r.text
        assert "".join(r.json()["text_output"]) == QUESTION


# -- streaming table: generator predict ----------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("model", STREAMERS)
@pytest.mark.parametrize("action", ["infer_stream", "generate_stream"])
async def test_generator_x_sse_one_event_per_item_in_order(
    client: httpx.AsyncClient, events: EventLog, tag: str, model: str, action: str
) -> None:
    # Cell: generator predict × infer_stream / generate_stream: one `data: <json>` event per
    # item, each encoded as in the outputs table (a dict → one output per key).
    body = {"inputs": [text("tag", tag), text("mode", "json"), text("n", "4")]}
    items = await sse_items(client, f"/v2/models/{model}/{action}", body)
    assert [outputs_by_name(i)["i"]["data"] for i in items] == [[0], [1], [2], [3]]
    assert [outputs_by_name(i)["sq"]["data"] for i in items] == [[0], [1], [4], [9]]
    assert all(i["model_name"] == model for i in items)
    assert events.names(tag)[-2:] == ["end", "finally"]


@pytest.mark.anyio
@pytest.mark.parametrize("model", STREAMERS)
async def test_generator_x_sse_wire_format(models_server: Server, tag: str, model: str) -> None:
    # Cell: generator × SSE: exactly `data: <json>\n\n` per item on the wire.
    body = json.dumps({"inputs": [text("tag", tag), text("n", "2")]}).encode()
    raw = await RawHttp.connect(models_server.url)
    try:
        await raw.send("POST", f"/v2/models/{model}/infer_stream", body)
        status, headers = await raw.head()
        assert status == 200
        assert headers["content-type"] == "text/event-stream"
        wire = await raw.body(headers)
    finally:
        await raw.close()
    events = wire.split(b"\n\n")
    assert events[-1] == b""
    assert len(events) == 3
    for i, event in enumerate(events[:2]):
        assert event.startswith(b"data: ")
        assert json.loads(event[6:])["outputs"][0]["data"] == [f"w{i} "]


@pytest.mark.anyio
@pytest.mark.parametrize("model", STREAMERS)
async def test_generator_x_infer_and_generate_gather(
    client: httpx.AsyncClient, tag: str, model: str
) -> None:
    # Cell: generator × OIP infer / generate: the items gathered, same-name outputs
    # concatenated along the first axis.
    body = {"inputs": [text("tag", tag), text("mode", "json"), text("n", "3")]}
    r = await client.post(f"/v2/models/{model}/infer", json=body)
    assert r.status_code == 200, r.text
    outs = outputs_by_name(r.json())
    assert outs["i"] == {"name": "i", "shape": [3], "datatype": "INT64", "data": [0, 1, 2]}
    assert outs["sq"]["data"] == [0, 1, 4]
    r = await client.post(
        f"/v2/models/{model}/generate", json={"tag": tag, "mode": "text", "n": "3"}
    )
    assert r.status_code == 200, r.text
    # Triton's generate form: the text pieces come back as one string, as Triton answers.
    assert r.json()["output"] == "w0 w1 w2 "


@pytest.mark.anyio
@pytest.mark.parametrize("model", STREAMERS)
@pytest.mark.parametrize("route", CHUNKED)
@pytest.mark.parametrize(
    ("mode", "chunks"),
    [
        ("text", [b"w0 ", b"w1 ", b"w2 "]),
        ("bytes", [b"b0;", b"b1;", b"b2;"]),
        ("json", [b'{"i":0,"sq":0}\n', b'{"i":1,"sq":1}\n', b'{"i":2,"sq":4}\n']),
    ],
)
async def test_generator_x_chunked_one_chunk_per_item(
    models_server: Server, tag: str, model: str, route: str, mode: str, chunks: list[bytes]
) -> None:
    # Cells: generator × Truss and × TorchServe: chunked, one chunk per item; str/bytes as
    # they are, anything else a JSON line.
    body = json.dumps({"tag": tag, "mode": mode, "n": 3}).encode()
    raw = await RawHttp.connect(models_server.url)
    try:
        await raw.send("POST", route.format(m=model), body, {"content-type": "application/json"})
        status, headers = await raw.head()
        assert status == 200
        assert headers["transfer-encoding"] == "chunked"
        assert await raw.chunks() == chunks
    finally:
        await raw.close()


@pytest.mark.anyio
@pytest.mark.parametrize("model", STREAMERS)
@pytest.mark.parametrize("route", [*CHUNKED, "/v2/models/{m}/generate_stream"])
async def test_first_item_arrives_before_the_generator_finishes(
    models_server: Server, events: EventLog, gates: Gates, tag: str, model: str, route: str
) -> None:
    # The model waits for a gate after its first item: the client must hold item 0 while the
    # generator is still running (no "end" yet), and gets the rest once the test opens the gate.
    gate = gates.new()
    body = json.dumps({"tag": tag, "mode": "text", "n": 3, "gate": gate}).encode()
    raw = await RawHttp.connect(models_server.url)
    try:
        await raw.send("POST", route.format(m=model), body, {"content-type": "application/json"})
        status, headers = await raw.head()
        assert status == 200
        first = await raw.chunk()
        assert first is not None and b"w0 " in first
        assert "end" not in events.names(tag)
        assert [e["i"] for e in events.of(tag) if e["event"] == "item"] == [0]
        gates.open(gate)
        rest = b"".join(await raw.chunks())
    finally:
        await raw.close()
    assert b"w1 " in rest and b"w2 " in rest
    assert "gate-timeout" not in events.names(tag)
    assert events.names(tag)[-2:] == ["end", "finally"]


# -- streaming table: plain predict on streaming endpoints ---------------------------------------
# Cells "plain predict × infer_stream/generate_stream" (one event) are asserted by oip_call in
# test_http_mapping.py for every input form; "plain predict × infer / Truss / TorchServe" (one
# response) by the outputs tests there.


# -- streaming table: error after the first item -------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("model", STREAMERS)
async def test_error_after_first_item_x_sse_is_a_last_error_event(
    client: httpx.AsyncClient, tag: str, model: str
) -> None:
    # Cell: error after the first item × SSE: a last event `data: {"error": "..."}`.
    body = {"inputs": [text("tag", tag), text("mode", "fail"), text("n", "3")]}
    items = await sse_items(client, f"/v2/models/{model}/infer_stream", body)
    assert len(items) == 2
    assert outputs_by_name(items[0])["i"]["data"] == [0]
    assert set(items[1]) == {"error"}
    assert "the stream failed after item 0" in items[1]["error"]
    assert model in items[1]["error"]
    # The server keeps serving the model.
    body = {"inputs": [text("tag", tag), text("n", "1")]}
    assert len(await sse_items(client, f"/v2/models/{model}/infer_stream", body)) == 1


@pytest.mark.anyio
@pytest.mark.parametrize("model", STREAMERS)
@pytest.mark.parametrize("route", CHUNKED)
async def test_error_after_first_item_x_chunked_is_a_last_error_line(
    models_server: Server, tag: str, model: str, route: str
) -> None:
    # Cells: error after the first item × TorchServe: a last line {"error": "..."}; × Truss:
    # the stream ends there, as Truss's server ends it (the error is logged).
    body = json.dumps({"tag": tag, "mode": "fail", "n": 3}).encode()
    raw = await RawHttp.connect(models_server.url)
    try:
        await raw.send("POST", route.format(m=model), body, {"content-type": "application/json"})
        status, _ = await raw.head()
        chunks = await raw.chunks()
    finally:
        await raw.close()
    assert status == 200
    assert chunks[0] == b'{"i":0,"sq":0}\n'
    if route.startswith("/v1/"):
        assert chunks == [b'{"i":0,"sq":0}\n']
        return
    last = b"".join(chunks[1:])
    assert last.endswith(b"\n")
    assert "the stream failed after item 0" in json.loads(last)["error"]


@pytest.mark.anyio
@pytest.mark.parametrize("model", STREAMERS)
async def test_error_after_first_item_x_infer_fails_the_request(
    client: httpx.AsyncClient, tag: str, model: str
) -> None:
    # Cell "error after the first item × infer / generate" is "—" in the table: the gathered
    # request fails as a whole, with the model's message.
    body = {"inputs": [text("tag", tag), text("mode", "fail"), text("n", "3")]}
    r = await client.post(f"/v2/models/{model}/infer", json=body)
    assert r.status_code == 500
    assert "the stream failed after item 0" in error_text(r)


# -- errors before the first item keep their status code -----------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("model", STREAMERS)
@pytest.mark.parametrize(
    "route", [*CHUNKED, "/v2/models/{m}/infer_stream", "/v2/models/{m}/generate_stream"]
)
async def test_error_before_first_item_gets_its_status(
    client: httpx.AsyncClient, tag: str, model: str, route: str
) -> None:
    url = route.format(m=model)
    r = await client.post(url, json={"tag": tag, "mode": "failfirst"})
    if "infer_stream" in url:
        # infer_stream takes only the tensor form: this body is not an inference request.
        assert r.status_code == 400
        body = {"inputs": [text("tag", tag), text("mode", "failfirst")]}
        r = await client.post(url, json=body)
    assert r.status_code == 500
    assert r.headers["content-type"] == "application/json"
    truss = url.startswith("/v1/")
    if truss:  # Truss's server tells its client no more than this of the model's error
        assert r.json() == {"error": "Internal Server Error (in model/chainlet)."}
        assert r.headers["x-baseten-error-code"] == "600"
    else:
        assert "the stream failed before its first item" in error_text(r)

    r = await client.post(route.format(m="no-such-model"), json={"tag": tag})
    assert r.status_code == 404
    assert "no-such-model" in error_text(r)

    r = await client.post(url, content=b"{broken", headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert ("Invalid JSON payload: " if truss else "malformed JSON") in error_text(r)
