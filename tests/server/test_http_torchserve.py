"""TorchServe inference routes end to end: /ping and /predictions/{m}[/{v}].

The protocol table's TorchServe columns (JSON parsed, other bodies as bytes, dict/list as JSON,
str/bytes as they are, starlette responses) are in test_http_mapping.py; chunked streaming (one
chunk per item) in test_http_streaming.py.
"""

from __future__ import annotations

import httpx
import pytest
from e2e_helpers import error_text, info

pytest_plugins = ["e2e_fixtures"]


@pytest.mark.anyio
@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_ping_is_healthy(client: httpx.AsyncClient, method: str) -> None:
    r = await client.request(method, "/ping")
    assert (r.status_code, r.json()) == (200, {"status": "Healthy"})


@pytest.mark.anyio
@pytest.mark.parametrize(("path", "version"), [("", "10"), ("/1", "1"), ("/2", "2"), ("/10", "10")])
async def test_predictions_reach_the_version(
    client: httpx.AsyncClient, path: str, version: str
) -> None:
    r = await client.post(f"/predictions/versioned{path}", json={})
    assert (r.status_code, r.json()) == (200, {"version": version})


@pytest.mark.anyio
async def test_an_unversioned_model_answers_to_version_1(client: httpx.AsyncClient) -> None:
    r = await client.post("/predictions/emit/1", json={"kind": "list"})
    assert (r.status_code, r.json()) == (200, [1.5, 2.5])
    r = await client.post("/predictions/emit/2", json={"kind": "list"})
    assert r.status_code == 404
    assert (
        "Request for unknown model: 'emit' version 2 is not found (versions: 1 (unversioned))"
        in error_text(r)
    )


@pytest.mark.anyio
async def test_predictions_accept_put(client: httpx.AsyncClient) -> None:
    r = await client.put("/predictions/emit", json={"kind": "list"})
    assert (r.status_code, r.json()) == (200, [1.5, 2.5])


@pytest.mark.anyio
async def test_model_reports_the_type_it_received(client: httpx.AsyncClient) -> None:
    # JSON arrives parsed; any other body as bytes.
    r = await client.post("/predictions/probe", json={"a": [1]})
    assert info(r.json()) == {"dict": {"a": {"list": [{"int": 1}]}}}
    r = await client.post(
        "/predictions/probe", content=b"\x89PNG", headers={"content-type": "image/png"}
    )
    assert info(r.json()) == {"bytes": "\x89PNG"}
