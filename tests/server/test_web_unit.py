"""The wrappers of ``server/http/_web.py`` on an in-memory ASGI app: what the end-to-end tests
cannot reach cheaply (any origin, streams, the settings' checks)."""

from __future__ import annotations

import gzip
from typing import Any

import pytest

from podium.config import ServerConfig, Web
from podium.server.http import RootPath, with_web
from podium.server.http._web import Cors, Gzip


def scope(method: str = "GET", path: str = "/", **headers: str) -> dict[str, Any]:
    pairs = [(k.replace("_", "-").lower().encode(), v.encode()) for k, v in headers.items()]
    return {"type": "http", "method": method, "path": path, "raw_path": path.encode(),
            "headers": pairs}  # fmt: skip


def answering(*bodies: bytes, headers: tuple[tuple[bytes, bytes], ...] = ()) -> Any:
    """An app that answers 200 with ``bodies`` (more than one: a stream); it records the scope."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        app.seen = scope  # type: ignore[attr-defined]
        await send({"type": "http.response.start", "status": 200, "headers": list(headers)})
        for index, body in enumerate(bodies):
            more = index < len(bodies) - 1
            await send({"type": "http.response.body", "body": body, "more_body": more})

    return app


async def call(app: Any, s: dict[str, Any]) -> tuple[int, dict[bytes, bytes], list[bytes]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(s, receive, send)
    start, *bodies = sent
    return start["status"], dict(start["headers"]), [m.get("body", b"") for m in bodies]


def test_nothing_asked_is_the_app_itself() -> None:
    app = answering(b"x")
    assert with_web(app, Web()) is app
    assert isinstance(with_web(app, Web(gzip=True, allow_origin_regex=".*")), Cors)


@pytest.mark.anyio
async def test_any_origin_is_star_unless_cookies_or_credentials() -> None:
    app = Cors(answering(b"x"), Web(allow_origins=("*",)))
    _, headers, _ = await call(app, scope(origin="https://a.test"))
    assert headers[b"access-control-allow-origin"] == b"*" and b"vary" not in headers
    _, headers, _ = await call(app, scope(origin="https://a.test", cookie="s=1"))
    assert headers[b"access-control-allow-origin"] == b"https://a.test"
    status, headers, body = await call(
        app, scope("OPTIONS", origin="https://a.test", access_control_request_method="GET")
    )
    assert (status, body) == (200, [b"OK"])
    assert headers[b"access-control-allow-origin"] == b"*"
    credentials = Cors(answering(b"x"), Web(allow_origins=("*",), allow_credentials=True))
    _, headers, _ = await call(
        credentials, scope("OPTIONS", origin="https://a.test", access_control_request_method="GET")
    )
    assert headers[b"access-control-allow-origin"] == b"https://a.test"


@pytest.mark.anyio
async def test_any_method_and_header() -> None:
    app = Cors(answering(b"x"), Web(allow_origins=("*",), allow_methods=("*",),
                                    allow_headers=("*",)))  # fmt: skip
    status, headers, _ = await call(
        app,
        scope("OPTIONS", origin="https://a.test", access_control_request_method="DELETE",
              access_control_request_headers="X-Anything"),
    )  # fmt: skip
    assert status == 200
    assert headers[b"access-control-allow-headers"] == b"X-Anything"
    assert b"DELETE" in headers[b"access-control-allow-methods"]


@pytest.mark.anyio
async def test_a_stream_passes_uncompressed() -> None:
    app = Gzip(answering(b"a" * 600, b"b" * 600), minimum_size=10)
    _, headers, bodies = await call(app, scope(accept_encoding="gzip"))
    assert b"content-encoding" not in headers and bodies == [b"a" * 600, b"b" * 600]


@pytest.mark.anyio
async def test_gzip_keeps_an_answer_already_encoded_and_compresses_at_the_minimum() -> None:
    encoded = Gzip(answering(b"z" * 600, headers=((b"content-encoding", b"br"),)))
    _, headers, bodies = await call(encoded, scope(accept_encoding="gzip, br"))
    assert headers[b"content-encoding"] == b"br" and bodies == [b"z" * 600]
    exact = Gzip(answering(b"z" * 500, headers=((b"content-length", b"500"),)), minimum_size=500)
    _, headers, bodies = await call(exact, scope(accept_encoding="deflate, gzip;q=0.5"))
    assert headers[b"content-encoding"] == b"gzip"
    assert gzip.decompress(bodies[0]) == b"z" * 500
    assert headers[b"content-length"] == str(len(bodies[0])).encode()
    _, headers, _ = await call(Gzip(answering(b"z" * 499)), scope(accept_encoding="gzip"))
    assert b"content-encoding" not in headers


@pytest.mark.anyio
async def test_root_path_strips_the_prefix_and_sets_root_path() -> None:
    inner = answering(b"")
    app = RootPath(inner, "/ml")
    await call(app, scope(path="/ml/v2"))
    assert (inner.seen["path"], inner.seen["raw_path"], inner.seen["root_path"]) == (
        "/v2",
        b"/v2",
        "/ml",
    )
    await call(app, scope(path="/ml"))
    assert inner.seen["path"] == "/"
    await call(app, scope(path="/mlx"))
    assert inner.seen["path"] == "/mlx"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"cors_allow_origins": ["app.example"]}, "cors-allow-origins: 'app.example' is not a web"),
        ({"cors_allow_origin_regex": "("}, "cors-allow-origin-regex: '\\(' is not a regular"),
        ({"cors_allow_methods": ["GE T"]}, "cors-allow-methods must be a header name"),
        ({"cors_allow_headers": ["X:Y"]}, "cors-allow-headers must be a header name"),
        ({"root_path": "ml"}, "root-path must be a path that starts with '/'"),
        ({"root_path": "/a?b"}, "root-path must be a path"),
        ({"gzip_min_size": -1}, "gzip-min-size"),
        ({"cors_max_age": -1}, "cors-max-age"),
    ],
)
def test_bad_web_settings_are_refused_naming_the_flag(values: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ServerConfig(**values)


def test_defaults_are_mlservers() -> None:
    web = ServerConfig().web
    assert not web.cors and not web.gzip and web.root_path == ""
    assert (web.allow_methods, web.max_age, web.gzip_min_size) == (("GET",), 600, 500)
    assert ServerConfig(root_path="/ml/").web.root_path == "/ml"
