"""MLServer runtimes served unmodified, end to end: a real `podium serve`, httpx and httpx-sse.

The runtimes in tests/models/mlserver and examples/mlserver-text import only from `mlserver`
(which is not installed in this environment: Podium provides the import paths).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from conftest import EXAMPLES, TEST_MODELS, Server, run_server
from httpx_sse import aconnect_sse

QUESTION = "What is the capital of France?"
PROMPT = {
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


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with run_server(TEST_MODELS / "mlserver", EXAMPLES / "mlserver-text") as running:
        yield running


@pytest.fixture
async def client(server: Server) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as c:
        yield c


def outputs(body: dict) -> dict[str, dict]:
    return {o["name"]: o for o in body["outputs"]}


@pytest.mark.anyio
async def test_oip_infer_through_mlservers_helpers(client: httpx.AsyncClient) -> None:
    body = {
        "id": "req-1",
        "inputs": [
            {"name": "x", "shape": [2], "datatype": "FP32", "data": [1.5, 2]},
            {"name": "text", "shape": [1], "datatype": "BYTES", "data": ["abc"]},
        ],
    }
    r = await client.post("/v2/models/mls-probe/infer", json=body, headers={"x-probe": "hello"})
    assert r.status_code == 200, r.text
    answer = r.json()
    assert (answer["model_name"], answer["id"]) == ("mls-probe", "req-1")
    got = outputs(answer)
    # NumpyCodec.encode_output adds the batch dimension; StringCodec answers [N, 1]
    assert got["x"] == {
        "name": "x",
        "shape": [2, 1],
        "datatype": "FP32",
        "parameters": {"content_type": "np"},
        "data": [3.0, 4.0],
    }
    assert got["text"]["data"] == ["ABC"]
    info = json.loads(got["info"]["data"][0])
    assert info["id"] == "req-1" and info["probe_header"] == "hello"
    assert info["name"] == "mls-probe" and info["uri"].endswith("tests/models/mlserver/probe")


@pytest.mark.anyio
async def test_decode_args_and_versions(client: httpx.AsyncClient) -> None:
    body = {
        "inputs": [
            {"name": "x", "shape": [2, 2], "datatype": "FP32", "data": [1, 2, 3, 4]},
            {"name": "words", "shape": [2], "datatype": "BYTES", "data": ["a", "b"]},
        ]
    }
    r = await client.post("/v2/models/mls-typed/infer", json=body)
    assert r.status_code == 200, r.text
    assert outputs(r.json())["output-0"]["data"] == [5.0, 9.0]
    # MLServer gives every request an id: Podium's is the request's own (docs/operations.md)
    assert r.json()["id"] == r.headers["x-request-id"]
    for version in ("1", "2"):
        r = await client.post(
            f"/v2/models/mls-versioned/versions/{version}/infer", json={"inputs": []}
        )
        assert r.status_code == 200, r.text
        assert outputs(r.json())["which"]["data"] == [f"version {version}"]


@pytest.mark.anyio
@pytest.mark.parametrize("action", ["infer_stream", "generate_stream"])
async def test_predict_stream_over_sse(client: httpx.AsyncClient, action: str) -> None:
    async with aconnect_sse(
        client, "POST", f"/v2/models/mlserver-text/{action}", json=PROMPT
    ) as source:
        assert source.response.status_code == 200
        items = [json.loads(event.data) async for event in source.aiter_sse()]
    pieces = []
    for item in items:
        assert (item["model_name"], item["model_version"]) == ("mlserver-text", "1")
        (output,) = item["outputs"]
        assert (output["name"], output["datatype"], output["shape"]) == ("output", "BYTES", [1, 1])
        pieces.extend(output["data"])
    assert pieces == ["What", " is", " the", " capital", " of", " France?"]
    assert len({item["id"] for item in items}) == 1


@pytest.mark.anyio
async def test_infer_calls_predict_on_a_streaming_runtime(client: httpx.AsyncClient) -> None:
    r = await client.post("/v2/models/mlserver-text/infer", json=PROMPT)
    assert r.status_code == 200, r.text
    (output,) = r.json()["outputs"]
    assert (output["shape"], output["data"]) == ([1, 1], [QUESTION])


@pytest.mark.anyio
async def test_a_runtime_that_raises_is_a_500_and_the_next_request_succeeds(
    client: httpx.AsyncClient,
) -> None:
    body = {
        "parameters": {"raise": "value"},
        "inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}],
    }
    r = await client.post("/v2/models/mls-raiser/infer", json=body)
    assert r.status_code == 500
    assert (
        r.json()["error"]
        == "model 'mls-raiser' predict raised ValueError: the runtime refused this request"
    )
    ok = await client.post("/v2/models/mls-raiser/infer", json={**body, "parameters": {}})
    assert ok.status_code == 200, ok.text
    assert outputs(ok.json())["output"]["data"] == ["ok"]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("what", "status"), [("inference", 400), ("notfound", 404), ("unavailable", 503)]
)
async def test_mlserver_errors_keep_their_status(
    client: httpx.AsyncClient, what: str, status: int
) -> None:
    body = {
        "parameters": {"raise": what},
        "inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}],
    }
    r = await client.post("/v2/models/mls-raiser/infer", json=body)
    assert r.status_code == status
    assert "model 'mls-raiser' predict raised" in r.json()["error"]


@pytest.mark.anyio
async def test_bad_requests_are_400s_naming_the_model(client: httpx.AsyncClient) -> None:
    bf16 = {"inputs": [{"name": "x", "shape": [1], "datatype": "BF16", "data": [1]}]}
    r = await client.post("/v2/models/mls-raiser/infer", json=bf16)
    assert r.status_code == 400 and "model 'mls-raiser'" in r.json()["error"]
    r = await client.post("/v1/models/mls-raiser:predict", json=[1, 2])
    assert r.status_code == 400
    assert "model 'mls-raiser' is an MLServer runtime" in r.json()["error"]
    r = await client.post("/predictions/mls-raiser", content=b"not json")
    assert r.status_code == 400
    ok = {"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}]}
    r = await client.post(
        "/predictions/mls-raiser", json=ok
    )  # an OIP request on TorchServe's route
    assert r.status_code == 200 and r.json()["outputs"][0]["data"] == ["ok"]


@pytest.mark.anyio
async def test_adaptive_batching_splits_the_answer_per_request(client: httpx.AsyncClient) -> None:
    async def call(rows: int) -> dict:
        body = {
            "inputs": [
                {
                    "name": "x",
                    "shape": [rows, 1],
                    "datatype": "INT64",
                    "data": list(range(1, rows + 1)),
                }
            ]
        }
        r = await client.post("/v2/models/mls-batcher/infer", json=body)
        assert r.status_code == 200, r.text
        return outputs(r.json())

    answers = await asyncio.gather(*(call(rows) for rows in (1, 2, 3)))
    for rows, got in zip((1, 2, 3), answers, strict=True):
        assert got["doubled"]["shape"] == [rows, 1]
        assert got["doubled"]["data"] == [2 * i for i in range(1, rows + 1)]
        seen = got["rows"]["data"]  # how many rows the merged request the runtime saw had
        assert len(seen) == rows and len(set(seen)) == 1 and seen[0] >= rows
