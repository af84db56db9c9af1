"""The management API's guard in memory (``BrowserGuard`` called as ASGI, no server), the start-up
rule for open management listeners, and the configuration values they take. End-to-end tests
are in ``test_management_exposure.py``."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from podium.config import ServerConfig, normalize_host, normalize_origin, origin_of
from podium.server import UnsafeExposure
from podium.server._guard import BrowserGuard, check_exposure, is_loopback


class Inner:
    """The wrapped app: records whether it ran and whether it read the body."""

    def __init__(self) -> None:
        self.calls = 0
        self.read_body = False

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.calls += 1
        if scope["type"] == "http":
            await receive()
            self.read_body = True
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"{}"})


async def call(
    guard: BrowserGuard, method: str = "GET", headers: dict[str, str] | None = None
) -> tuple[int, dict[bytes, bytes], dict[str, Any]]:
    scope = {
        "type": "http",
        "method": method,
        "path": "/models",
        "query_string": b"",
        "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await guard(scope, receive, send)
    start, body = sent[0], sent[1]
    payload = json.loads(body["body"]) if body["body"] else {}
    return start["status"], dict(start["headers"]), payload


@pytest.fixture
def inner() -> Inner:
    return Inner()


@pytest.mark.anyio
@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "127.0.0.1:8081",
        "127.0.0.2:1",
        "[::1]",
        "[::1]:8081",
        "[fe80::1%25eth0]:1",  # a scoped literal still has no name to rebind
        "192.168.1.10:8081",
        "localhost",
        "localhost.:9",
        "LocalHost:8081",
        "ops.example",
        "OPS.example.:443",
        "",  # an empty Host: a request line without authority, not a browser
    ],
)
async def test_hosts_that_pass(inner: Inner, host: str) -> None:
    guard = BrowserGuard(inner, allowed_hosts=["ops.example"])
    status, _, _ = await call(guard, headers={"Host": host})
    assert status == 200 and inner.calls == 1


@pytest.mark.anyio
@pytest.mark.parametrize(
    "host",
    [
        "evil.example",
        "evil.example:8081",
        "127.0.0.1.nip.io",
        "localhost.evil.example",
        "sub.ops.example",
        "ops.example.evil",
        "2130706433",  # a number is a name to the resolver, not an IP literal here
        "::1",  # unbracketed IPv6: malformed
        "[::1",
        "[::1]x",
        "localhost:80:80",
        "localhost:http",
        "localhost:\u00b2",  # a digit to str.isdigit, not a port
    ],
)
async def test_hosts_that_are_misdirected(inner: Inner, host: str) -> None:
    guard = BrowserGuard(inner, allowed_hosts=["ops.example"])
    status, _, body = await call(guard, "POST", headers={"Host": host})
    assert status == 421 and inner.calls == 0
    assert body["type"] == "MisdirectedRequestException"
    assert "--management-allowed-hosts" in body["message"]


@pytest.mark.anyio
async def test_every_host_header_must_pass(inner: Inner) -> None:
    guard = BrowserGuard(inner)
    scope_headers = [(b"host", b"127.0.0.1"), (b"host", b"evil.example")]

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": "/", "headers": scope_headers}
    await guard(scope, None, send)
    assert sent[0]["status"] == 421 and inner.calls == 0


@pytest.mark.anyio
async def test_origins(inner: Inner) -> None:
    guard = BrowserGuard(inner, allowed_origins=["https://admin.example", "http://[::1]:3000"])
    for origin in ("https://admin.example", "HTTPS://Admin.Example:443", "http://[::1]:3000"):
        status, headers, _ = await call(guard, "POST", {"Origin": origin})
        assert status == 200, origin
        assert headers[b"access-control-allow-origin"] == origin.encode()
    for origin in (
        "https://evil.example",
        "http://admin.example",  # another scheme is another origin
        "https://admin.example:8443",
        "null",
        "https://admin.example/path",
        "",
        "https://user@admin.example",
    ):
        status, headers, body = await call(guard, "POST", {"Origin": origin})
        assert status == 403 and body["type"] == "ForbiddenException", origin
        assert b"access-control-allow-origin" not in headers
    assert inner.calls == 3


@pytest.mark.anyio
async def test_two_origins_are_refused_even_if_one_is_allowed(inner: Inner) -> None:
    guard = BrowserGuard(inner, allowed_origins=["https://admin.example"])
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    headers = [(b"origin", b"https://admin.example"), (b"origin", b"https://evil.example")]
    await guard({"type": "http", "method": "GET", "path": "/", "headers": headers}, None, send)
    assert sent[0]["status"] == 403 and inner.calls == 0


@pytest.mark.anyio
async def test_fetch_site(inner: Inner) -> None:
    guard = BrowserGuard(inner, allowed_origins=["https://admin.example"])
    for site in ("none", "same-origin", "Same-Origin"):
        assert (await call(guard, headers={"Sec-Fetch-Site": site}))[0] == 200
    for site in ("cross-site", "same-site", "something-new"):
        status, _, body = await call(guard, headers={"Sec-Fetch-Site": site})
        assert status == 403 and site in body["message"]
    # An allowed page's request is cross-site, and passes with its Origin.
    headers = {"Sec-Fetch-Site": "cross-site", "Origin": "https://admin.example"}
    assert (await call(guard, headers=headers))[0] == 200


@pytest.mark.anyio
async def test_simple_body_types_on_state_changing_methods(inner: Inner) -> None:
    guard = BrowserGuard(inner)
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        for content_type in (
            "text/plain",
            "TEXT/PLAIN; charset=UTF-8",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
        ):
            status, _, body = await call(guard, method, {"Content-Type": content_type})
            assert status == 415, (method, content_type)
            assert body["type"] == "UnsupportedMediaTypeException"
    assert inner.calls == 0 and not inner.read_body
    for method, content_type in (
        ("GET", "text/plain"),
        ("POST", "application/json"),
        ("POST", "application/octet-stream"),
    ):
        assert (await call(guard, method, {"Content-Type": content_type}))[0] == 200
    assert (await call(guard, "POST"))[0] == 200  # no body type at all: curl -X POST


@pytest.mark.anyio
async def test_the_refusals_come_in_order_host_origin_body(inner: Inner) -> None:
    guard = BrowserGuard(inner)
    form = {"Content-Type": "text/plain", "Origin": "https://evil.example"}
    assert (await call(guard, "POST", {**form, "Host": "evil.example"}))[0] == 421
    assert (await call(guard, "POST", form))[0] == 403
    assert (await call(guard, "POST", {"Content-Type": "text/plain"}))[0] == 415


@pytest.mark.anyio
async def test_preflight_of_an_allowed_origin_is_answered_here(inner: Inner) -> None:
    guard = BrowserGuard(inner, allowed_origins=["https://admin.example"])
    status, headers, _ = await call(
        guard,
        "OPTIONS",
        {"Origin": "https://admin.example", "Access-Control-Request-Method": "DELETE"},
    )
    assert status == 204 and inner.calls == 0
    assert headers[b"access-control-allow-origin"] == b"https://admin.example"
    assert b"DELETE" in headers[b"access-control-allow-methods"]
    # A plain OPTIONS (the API description) goes through, with the CORS header.
    status, headers, _ = await call(guard, "OPTIONS", {"Origin": "https://admin.example"})
    assert status == 200 and inner.calls == 1
    assert headers[b"vary"] == b"Origin"


@pytest.mark.anyio
async def test_websockets_from_other_sites_are_closed(inner: Inner) -> None:
    guard = BrowserGuard(inner)
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "websocket", "path": "/", "headers": [(b"origin", b"https://evil.example")]}
    await guard(scope, None, send)
    assert sent[0]["type"] == "websocket.close" and sent[0]["code"] == 1008
    assert inner.calls == 0
    await guard({"type": "lifespan"}, None, send)  # other scopes pass untouched
    assert inner.calls == 1


# -- configuration ------------------------------------------------------------------------------


def test_origin_of() -> None:
    assert origin_of("https://Admin.Example:443") == "https://admin.example"
    assert origin_of("http://admin.example:80") == "http://admin.example"
    assert origin_of("http://admin.example:8080") == "http://admin.example:8080"
    assert origin_of("http://[::1]:3000") == "http://[::1]:3000"
    for bad in ("null", "*", "file://x", "https://", "https://a/b", "https://a?b", "ftp://a", "a"):
        assert origin_of(bad) is None, bad
    assert origin_of("https://a:99999") is None


def test_config_values_are_checked_and_normalized() -> None:
    config = ServerConfig(
        management_allowed_hosts=("Ops.Example.", "ops.example"),
        management_allowed_origins=["https://Admin.example:443"],
    )
    assert config.management.allowed_hosts == ("ops.example",)
    assert config.management.allowed_origins == ("https://admin.example",)
    assert ServerConfig(management_allowed_hosts="a.b").management.allowed_hosts == ("a.b",)  # type: ignore[arg-type]
    for bad in ("*", "*.example", "a b", "host:8081", "", "a..b"):
        with pytest.raises(ValueError, match="management-allowed-hosts"):
            ServerConfig(management_allowed_hosts=(bad,))
    for bad in ("*", "null", "admin.example", "https://admin.example/ui"):
        with pytest.raises(ValueError, match="management-allowed-origins"):
            ServerConfig(management_allowed_origins=(bad,))
    with pytest.raises(ValueError, match="allow-open-management"):
        ServerConfig(allow_open_management="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="auth must be true"):
        ServerConfig(auth="on")  # type: ignore[arg-type]
    assert normalize_host("LOCALHOST.") == "localhost"
    assert normalize_origin("http://x:80") == "http://x"


def test_auth_defaults_to_the_management_api_only() -> None:
    assert ServerConfig().auth.enabled is None
    assert ServerConfig(auth=True).auth.enabled is True
    assert ServerConfig(auth=False).auth.enabled is False
    assert not ServerConfig().management.allow_open


# -- the start-up rule --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("[::1]", True),
        ("::ffff:127.0.0.1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("", False),
        ("192.0.2.1", False),
        ("::ffff:192.0.2.1", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_check_exposure(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="podium"):
        check_exposure("127.0.0.1", keys=False, allow_open=False, ports="ports 1 and 2")
        assert caplog.records == []
        with pytest.raises(UnsafeExposure, match="--allow-open-management") as refused:
            check_exposure("0.0.0.0", keys=False, allow_open=False, ports="ports 1 and 2")
        message = str(refused.value)
        assert "0.0.0.0 (ports 1 and 2)" in message and "--management-host" in message
        assert "run any code" in message
        check_exposure("0.0.0.0", keys=False, allow_open=True, ports="ports 1 and 2")
        assert "WITHOUT token authorization" in caplog.records[-1].getMessage()
        check_exposure("::", keys=True, allow_open=False, ports="ports 1 and 2")
        assert "needs the management key" in caplog.records[-1].getMessage()
        assert all(r.levelno == logging.WARNING for r in caplog.records)
