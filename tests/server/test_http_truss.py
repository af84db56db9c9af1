"""Truss-style routes end to end: GET /v1/models/{m} and POST /v1/models/{m}:predict.

The protocol table's Truss column (input forms, output encodings, starlette responses) is in
test_http_mapping.py; Truss streaming (chunks, first chunk before the generator ends, errors
after the first chunk) in test_http_streaming.py; not ready (503) in test_http_readiness.py.
"""

from __future__ import annotations

import httpx
import pytest
from e2e_helpers import info

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
