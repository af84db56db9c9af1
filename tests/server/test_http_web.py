"""MLServer's ``cors_settings``, ``gzip_enabled`` and ``root_path`` end to end (issue 22): a
real ``podium serve`` with the flags they map to, reached with httpx as a browser's requests
would reach it; and a server without them, which answers exactly as before.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from conftest import TEST_MODELS, Server, run_server

PROBE = TEST_MODELS / "serve" / "probe"
APP = "https://app.example"
PLAIN = {"Accept-Encoding": "identity"}

WEB_FLAGS = (
    "--cors-allow-origins", APP,
    "--cors-allow-origin-regex", r"https://[a-z]+\.example\.org",
    "--cors-allow-credentials",
    "--cors-allow-methods", "GET", "--cors-allow-methods", "POST",
    "--cors-allow-headers", "X-Custom",
    "--cors-expose-headers", "X-Request-Id",
    "--cors-max-age", "120",
    "--gzip",
    "--root-path", "/ml/",
)  # fmt: skip


@pytest.fixture(scope="module")
def web_server() -> Iterator[Server]:
    with run_server(PROBE, args=WEB_FLAGS) as running:
        yield running


@pytest.fixture(scope="module")
def plain_server() -> Iterator[Server]:
    with run_server(PROBE) as running:
        yield running


@pytest.fixture
async def web(web_server: Server) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=web_server.url, timeout=10, headers=PLAIN) as c:
        yield c


@pytest.fixture
async def plain(plain_server: Server) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=plain_server.url, timeout=10, headers=PLAIN) as c:
        yield c


def preflight(origin: str, method: str = "POST", headers: str | None = None) -> dict[str, str]:
    asked = {"Origin": origin, "Access-Control-Request-Method": method}
    if headers is not None:
        asked["Access-Control-Request-Headers"] = headers
    return asked


# -- CORS ---------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_preflight_from_an_allowed_origin_is_answered(web: httpx.AsyncClient) -> None:
    asked = preflight(APP, "POST", "Content-Type, X-Custom")
    response = await web.options("/v2/models/probe/infer", headers=asked)
    assert response.status_code == 200 and response.text == "OK"
    h = response.headers
    assert h["access-control-allow-origin"] == APP  # credentials: never '*'
    assert h["access-control-allow-credentials"] == "true"
    assert h["access-control-allow-methods"] == "GET, POST"
    assert h["access-control-max-age"] == "120"
    allowed = {v.strip().lower() for v in h["access-control-allow-headers"].split(",")}
    assert {"content-type", "x-custom", "accept"} <= allowed
    assert "Origin" in h["vary"]


@pytest.mark.anyio
async def test_a_preflight_asking_too_much_is_refused_with_what(web: httpx.AsyncClient) -> None:
    response = await web.options("/v2/health/ready", headers=preflight(APP, "PUT", "X-Other"))
    assert response.status_code == 400
    assert response.text == "Disallowed CORS method, headers"
    assert response.headers["access-control-allow-origin"] == APP
    other = await web.options("/v2/health/ready", headers=preflight("https://evil.example"))
    assert other.status_code == 400 and other.text == "Disallowed CORS origin"
    assert "access-control-allow-origin" not in other.headers


@pytest.mark.anyio
async def test_a_simple_request_gets_the_cors_headers(web: httpx.AsyncClient) -> None:
    response = await web.get("/v2/health/ready", headers={"Origin": APP})
    assert response.status_code == 200
    h = response.headers
    assert h["access-control-allow-origin"] == APP
    assert h["access-control-allow-credentials"] == "true"
    assert h["access-control-expose-headers"] == "X-Request-Id"
    assert "Origin" in h["vary"]
    # an error answer too: the page must be able to read it
    missing = await web.get("/v2/models/nope", headers={"Origin": APP})
    assert missing.status_code == 404
    assert missing.headers["access-control-allow-origin"] == APP


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("origin", "allowed"),
    [
        ("https://shop.example.org", True),
        ("https://shop.example.org.evil.test", False),  # the whole origin must match
        ("http://shop.example.org", False),
        ("https://evil.example", False),
    ],
)
async def test_the_origin_regex_matches_whole_origins(
    web: httpx.AsyncClient, origin: str, allowed: bool
) -> None:
    response = await web.get("/v2/health/live", headers={"Origin": origin})
    assert response.status_code == 200
    assert response.headers.get("access-control-allow-origin") == (origin if allowed else None)
    # the answer is not CORS-approved, but the credentials header is still sent, as Starlette
    assert response.headers["access-control-allow-credentials"] == "true"


@pytest.mark.anyio
async def test_without_an_origin_no_cors_headers(web: httpx.AsyncClient) -> None:
    response = await web.get("/v2/health/ready")
    assert not [k for k in response.headers if k.startswith("access-control-")]


# -- gzip ---------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_gzip_when_the_client_accepts_it(web: httpx.AsyncClient) -> None:
    response = await web.get("/v2/docs/openapi.json", headers={"Accept-Encoding": "gzip"})
    assert response.status_code == 200
    assert response.headers["content-encoding"] == "gzip"
    assert "Accept-Encoding" in response.headers["vary"]
    length = int(response.headers["content-length"])
    assert response.num_bytes_downloaded == length < len(response.content)
    assert response.json()["openapi"]
    plain = await web.get("/v2/docs/openapi.json")
    assert "content-encoding" not in plain.headers
    assert plain.content == response.content
    refused = await web.get("/v2/docs/openapi.json", headers={"Accept-Encoding": "gzip;q=0"})
    assert "content-encoding" not in refused.headers


@pytest.mark.anyio
async def test_an_answer_under_the_minimum_size_is_not_compressed(web: httpx.AsyncClient) -> None:
    response = await web.get("/v2", headers={"Accept-Encoding": "gzip"})
    assert response.status_code == 200 and len(response.content) < 500
    assert "content-encoding" not in response.headers
    assert response.json()["name"] == "podium"


# -- root_path ----------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    "path", ["/ml/v2/health/ready", "/v2/health/ready", "/ml/v2/models/probe/ready"]
)
async def test_routes_answer_under_the_root_path_and_at_the_root(
    web: httpx.AsyncClient, path: str
) -> None:
    response = await web.get(path)
    assert response.status_code == 200, response.text


@pytest.mark.anyio
async def test_the_openapi_document_names_the_root_path_as_its_server(
    web: httpx.AsyncClient, plain: httpx.AsyncClient
) -> None:
    """As FastAPI's (MLServer's) under a root path: the operations are called under the prefix."""
    for path in ("/ml/v2/docs/openapi.json", "/v2/docs/openapi.json", "/ml/api-description"):
        document = (await web.get(path)).json()
        assert document["servers"] == [{"url": "/ml"}], path
        assert "/v2/models/{model}/infer" in document["paths"]
    assert "servers" not in (await plain.get("/v2/docs/openapi.json")).json()


@pytest.mark.anyio
@pytest.mark.parametrize("path", ["/mlx/v2/health/ready", "/ml/ml/v2/health/ready"])
async def test_a_path_that_only_looks_like_the_root_path_is_not_found(
    web: httpx.AsyncClient, path: str
) -> None:
    assert (await web.get(path)).status_code == 404


# -- nothing asked: nothing changes -------------------------------------------------------------


@pytest.mark.anyio
async def test_by_default_no_cors_no_gzip_no_root_path(plain: httpx.AsyncClient) -> None:
    answered = await plain.get("/v2/health/ready", headers={"Origin": APP})
    assert answered.status_code == 200
    assert not [k for k in answered.headers if k.startswith("access-control-")]
    asked = await plain.options("/v2/models/probe/infer", headers=preflight(APP))
    assert asked.status_code != 200 and "access-control-allow-origin" not in asked.headers
    zipped = await plain.get("/v2/docs/openapi.json", headers={"Accept-Encoding": "gzip"})
    assert zipped.status_code == 200 and "content-encoding" not in zipped.headers
    assert (await plain.get("/ml/v2/health/ready")).status_code == 404
