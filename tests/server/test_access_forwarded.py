"""X-Forwarded-For and X-Forwarded-Proto: the access middleware reads them as uvicorn does.

``podium serve`` runs uvicorn without its ``ProxyHeadersMiddleware`` around Podium's access
middleware, which applies uvicorn's own middleware only to a request that carries one of the
headers (``server/http/_access.py``). What an app sees must be what it saw under uvicorn's.
"""

from __future__ import annotations

from typing import Any

import pytest
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from podium.server._access import AccessLog, RequestIds
from podium.server._limits import ConnectionGuard, ConnectionLimits
from podium.server._listener import Uvicorn, bind
from podium.server.http import INFERENCE_ROUTES, AccessMiddleware, RootPath

pytestmark = pytest.mark.anyio


def _scope(kind: str, peer: str | None, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    return {
        "type": kind,
        "method": "GET",
        "path": "/v2/health/live",
        "scheme": "ws" if kind == "websocket" else "http",
        "client": None if peer is None else (peer, 40000),
        "headers": [(b"host", b"podium"), *headers],
    }


def _stacks(trusted: str) -> tuple[Any, Any, list[tuple[Any, Any]]]:
    """Podium's stack and uvicorn's around the same recording app."""
    seen: list[tuple[Any, Any]] = []

    async def inner(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append((scope["client"], scope["scheme"]))
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b""})

    def access() -> AccessMiddleware:
        return AccessMiddleware(
            inner, log=AccessLog(False), ids=RequestIds(), routes=INFERENCE_ROUTES
        )

    ours = access()
    ours.forwarded_from(trusted)
    theirs = ProxyHeadersMiddleware(access(), trusted_hosts=trusted)
    return ours, theirs, seen


async def _serve(app: Any, scope: dict[str, Any]) -> None:
    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        pass

    await app(scope, receive, send)


XFF, PROTO = b"x-forwarded-for", b"x-forwarded-proto"

CASES = [
    # (trusted hosts, scope type, peer, headers)
    ("127.0.0.1", "http", "127.0.0.1", []),
    ("127.0.0.1", "http", "127.0.0.1", [(XFF, b"203.0.113.7")]),
    ("127.0.0.1", "http", "127.0.0.1", [(XFF, b"203.0.113.7:4711"), (PROTO, b"https")]),
    ("127.0.0.1", "http", "127.0.0.1", [(PROTO, b" https ")]),
    ("127.0.0.1", "http", "127.0.0.1", [(PROTO, b"ftp")]),  # not a scheme uvicorn takes
    ("127.0.0.1", "http", "127.0.0.1", [(XFF, b"")]),  # empty: the client is kept
    ("127.0.0.1", "http", "127.0.0.1", [(XFF, b"[2001:db8::1]:80")]),
    # several headers joined; the first untrusted from the right is the client
    (
        "127.0.0.1,10.0.0.0/8",
        "http",
        "127.0.0.1",
        [(XFF, b"198.51.100.1, 10.1.1.1"), (XFF, b"10.2.2.2")],
    ),
    ("127.0.0.1,10.0.0.0/8", "http", "127.0.0.1", [(XFF, b"10.3.3.3, 10.1.1.1")]),  # all trusted
    ("127.0.0.1", "http", "192.0.2.9", [(XFF, b"203.0.113.7"), (PROTO, b"https")]),  # untrusted
    ("127.0.0.1", "http", None, [(XFF, b"203.0.113.7")]),  # no peer (a Unix socket)
    ("*", "http", "192.0.2.9", [(XFF, b"203.0.113.7, 198.51.100.1"), (PROTO, b"https")]),
    ("127.0.0.1", "websocket", "127.0.0.1", [(XFF, b"203.0.113.7"), (PROTO, b"https")]),
    ("127.0.0.1", "websocket", "192.0.2.9", [(XFF, b"203.0.113.7"), (PROTO, b"https")]),
    # the other headers the middleware reads are still read beside them
    ("127.0.0.1", "http", "127.0.0.1", [(b"x-request-id", b"r-1"), (XFF, b"203.0.113.7")]),
    ("127.0.0.1", "http", "127.0.0.1", [(b"x-podium-priority", b"1"), (XFF, b"203.0.113.7")]),
]


@pytest.mark.parametrize(("trusted", "kind", "peer", "headers"), CASES)
async def test_the_client_and_scheme_are_uvicorns(
    trusted: str, kind: str, peer: str | None, headers: list[tuple[bytes, bytes]]
) -> None:
    ours, theirs, seen = _stacks(trusted)
    await _serve(theirs, _scope(kind, peer, headers))
    await _serve(ours, _scope(kind, peer, headers))
    assert seen[0] == seen[1]


async def test_a_trusted_proxy_names_the_client_and_scheme() -> None:
    ours, _, seen = _stacks("127.0.0.1")
    await _serve(ours, _scope("http", "127.0.0.1", [(XFF, b"203.0.113.7"), (PROTO, b"https")]))
    await _serve(ours, _scope("http", "192.0.2.9", [(XFF, b"203.0.113.7"), (PROTO, b"https")]))
    assert seen == [(("203.0.113.7", 0), "https"), (("192.0.2.9", 40000), "http")]


async def test_without_forwarded_from_the_headers_are_not_read() -> None:
    _, _, seen = _stacks("127.0.0.1")
    plain = AccessMiddleware(
        lambda *args: _record(seen, *args),
        log=AccessLog(False),
        ids=RequestIds(),
        routes=INFERENCE_ROUTES,
    )
    await _serve(plain, _scope("http", "127.0.0.1", [(XFF, b"203.0.113.7"), (PROTO, b"https")]))
    assert seen == [(("127.0.0.1", 40000), "http")]


async def _record(seen: list[Any], scope: dict[str, Any], receive: Any, send: Any) -> None:
    seen.append((scope["client"], scope["scheme"]))
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b""})


def _uvicorn(app: Any) -> Uvicorn:
    sock = bind("127.0.0.1", 0)
    server = Uvicorn(app, sock, graceful=1, guard=ConnectionGuard("http-t", ConnectionLimits()))
    sock.close()
    return server


async def test_serve_runs_uvicorns_proxy_headers_only_where_podiums_do_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FORWARDED_ALLOW_IPS", "192.0.2.9")  # uvicorn's setting, as it reads it
    seen: list[Any] = []
    access = AccessMiddleware(
        lambda *args: _record(seen, *args),
        log=AccessLog(False),
        ids=RequestIds(),
        routes=INFERENCE_ROUTES,
    )
    assert _uvicorn(access).server.config.proxy_headers is False
    await _serve(access, _scope("http", "192.0.2.9", [(XFF, b"203.0.113.7")]))
    await _serve(access, _scope("http", "127.0.0.1", [(XFF, b"203.0.113.7")]))  # not trusted now
    assert seen == [(("203.0.113.7", 0), "http"), (("127.0.0.1", 40000), "http")]
    # under --root-path (RootPath around it) the access middleware still reads them itself
    rooted = RootPath(access, "/ml")
    assert _uvicorn(rooted).server.config.proxy_headers is False
    await _serve(rooted, _scope("http", "192.0.2.9", [(XFF, b"203.0.113.7")]))
    assert seen[-1] == (("203.0.113.7", 0), "http")
    # an app without Podium's access middleware (the metrics listener's) keeps uvicorn's
    assert _uvicorn(_record).server.config.proxy_headers is True
    assert _uvicorn(RootPath(_record, "/ml")).server.config.proxy_headers is True
