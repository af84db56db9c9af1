"""TorchServe handlers served unmodified, end to end: .mar files built by `podium archive`,
served by a real `podium serve`, called over HTTP with httpx."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from conftest import TEST_MODELS, Server, run_server
from e2e_helpers import PATIENCE, EventLog, error_text

TS_MODELS = TEST_MODELS / "torchserve"
HANDLERS = ["module-style", "class-style", "steps", "batcher", "streamer", "raiser"]


def _archive(name: str, store: Path) -> Path:
    src = TS_MODELS / name
    cmd = [sys.executable, "-m", "podium", "archive", "--model-name", name,
           "--handler", str(src / "handler.py"), "--export-path", str(store)]  # fmt: skip
    if (src / "model-config.yaml").exists():
        cmd += ["--config-file", str(src / "model-config.yaml")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return store / f"{name}.mar"


@pytest.fixture(scope="module")
def ts_events(tmp_path_factory: pytest.TempPathFactory) -> EventLog:
    return EventLog(tmp_path_factory.mktemp("ts-events") / "events.jsonl")


@pytest.fixture(scope="module")
def ts_server(tmp_path_factory: pytest.TempPathFactory, ts_events: EventLog) -> Iterator[Server]:
    store = tmp_path_factory.mktemp("model-store")
    mars = [_archive(name, store) for name in HANDLERS]
    with run_server(*mars, env={"PODIUM_E2E_EVENTS": str(ts_events.path)}) as server:
        yield server


@pytest.fixture
async def client(ts_server: Server) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=ts_server.url, timeout=PATIENCE) as c:
        yield c


@pytest.mark.anyio
async def test_json_body_headers_and_status(client: httpx.AsyncClient) -> None:
    r = await client.post(
        "/predictions/class-style",
        json={"q": 1},
        headers={"X-Custom": "abc", "X-Want-Status": "201"},
    )
    assert r.status_code == 201
    assert r.headers["x-handled-by"] == "class-style"
    # the handler's X-Request-Id (context.get_request_id) is the request's id: one header
    (request_id,) = r.headers.get_list("x-request-id")
    assert request_id
    assert r.headers["content-type"] == "application/json"
    body = r.json()
    assert body["body"] == {"q": 1} and body["header"] == "abc" and body["greeting"] == "hello"
    assert body["server_name"] == "Podium"


@pytest.mark.anyio
async def test_content_type_set_by_the_handler(client: httpx.AsyncClient) -> None:
    r = await client.post("/predictions/class-style", content=b"bob", headers={"X-Want-Text": "1"})
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/x-greeting"
    assert r.text == "hello bob"


@pytest.mark.anyio
async def test_binary_body_reaches_a_module_style_handler(client: httpx.AsyncClient) -> None:
    r = await client.post("/predictions/module-style", content=b"\x01\x02raw")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")  # a str result, as it is
    body = json.loads(r.text)
    assert body["type"] == "bytearray" and body["body"] == "\x01\x02raw"
    assert body["initialized"] == 1


@pytest.mark.anyio
async def test_default_handle_and_version_route(client: httpx.AsyncClient) -> None:
    r = await client.post("/predictions/steps", json={"x": 2.5})
    assert r.status_code == 200 and r.json() == {"y": 5.0, "metrics": True}


@pytest.mark.anyio
async def test_concurrent_requests_reach_one_handle_call(
    client: httpx.AsyncClient, ts_events: EventLog
) -> None:
    tag = uuid.uuid4().hex
    responses = await asyncio.gather(
        *(
            client.post(
                "/predictions/batcher", json={"tag": tag, "x": i}, headers={"X-Item": str(i)}
            )
            for i in range(4)
        )
    )
    assert [r.status_code for r in responses] == [200] * 4
    assert sorted(r.json()["y"] for r in responses) == [0, 10, 20, 30]
    assert [r.json()["header"] for r in responses] == ["0", "1", "2", "3"]
    (batch,) = await ts_events.wait_for(tag, "batch")
    assert batch["size"] == 4 and sorted(batch["xs"]) == [0, 1, 2, 3]


@pytest.mark.anyio
async def test_streaming_handler_sends_chunks(client: httpx.AsyncClient) -> None:
    chunks: list[bytes] = []
    async with client.stream("POST", "/predictions/streamer", json={"text": "one two three"}) as r:
        assert r.status_code == 200
        assert r.headers["x-streamed"] == "yes"
        assert r.headers["transfer-encoding"] == "chunked"
        async for chunk in r.aiter_raw():
            chunks.append(chunk)
    assert b"".join(chunks) == b"one two three"
    assert len(chunks) >= 2  # streamed, not gathered into one body


@pytest.mark.anyio
async def test_handler_errors_are_500_and_the_server_keeps_serving(
    client: httpx.AsyncClient,
) -> None:
    r = await client.post("/predictions/raiser", json={"do": "raise"})
    assert r.status_code == 500
    assert "handler 'handler.py' raised ValueError: the handler was told to fail" in error_text(r)
    r = await client.post("/predictions/raiser", json={"do": "dict"})
    assert r.status_code == 500 and "must return a list" in error_text(r)
    r = await client.post("/predictions/raiser", json={"do": "refuse"})
    assert r.status_code == 429 and r.json()["message"] == "not today"
    r = await client.post("/predictions/raiser", content=b"anything")
    assert r.status_code == 200 and r.text == "fine"


@pytest.mark.anyio
async def test_oip_call_gets_the_v2_request(client: httpx.AsyncClient) -> None:
    request = {"inputs": [{"name": "x", "shape": [1], "datatype": "INT64", "data": [7]}]}
    r = await client.post("/v2/models/module-style/infer", json=request)
    assert r.status_code == 200
    (output,) = r.json()["outputs"]
    assert json.loads(output["data"][0])["body"]["inputs"][0]["data"] == [7]


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "torchserve-handler"


def test_example_mar_built_as_its_readme_says_is_served(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "podium", "archive", "--model-name", "ts-sentiment",
           "--version", "1.0", "--handler", str(EXAMPLE / "handler.py"),
           "--config-file", str(EXAMPLE / "model-config.yaml"),
           "--extra-files", str(EXAMPLE / "lexicon.json"), "--export-path", str(tmp_path)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    with run_server(tmp_path / "ts-sentiment.mar") as server:
        r = httpx.post(
            server.url + "/predictions/ts-sentiment/1.0", content=b"slow and broken", timeout=10
        )
        assert r.status_code == 200 and r.json()["label"] == "negative"
        assert r.headers["x-batch-size"] == "1"


def test_example_directory_is_served_by_the_examples_server(examples_server: Server) -> None:
    r = httpx.post(
        examples_server.url + "/predictions/ts-sentiment",
        json={"text": "I love it, great and fast"},
        timeout=10,
    )
    assert r.status_code == 200 and r.json() == {"label": "positive", "score": 0.833}
