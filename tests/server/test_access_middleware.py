"""The access middleware's wrappers of ``receive`` and ``send`` (``server/http/_access.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from podium.server._access import Access, AccessLog, RequestIds
from podium.server.http import INFERENCE_ROUTES, AccessMiddleware

pytestmark = pytest.mark.anyio

#: A constant list of headers, as apps keep them (``_responses.SSE``): never changed
HEADERS = [(b"content-type", b"text/plain"), (b"X-Request-ID", b"the-models")]


class _Log(AccessLog):
    """Keeps each request's Access as written, its line not made."""

    def __init__(self, enabled: bool) -> None:
        super().__init__(enabled)
        self.lines_written: list[Access] = []

    def wants(self) -> bool:
        return True

    def write(self, access: Access, wanted: bool = False) -> None:
        self.lines_written.append(access)


async def test_each_response_has_the_id_once_and_the_apps_headers_are_left_alone() -> None:
    log = _Log(True)
    lines = log.lines_written

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 201, "headers": HEADERS})
        await send({"type": "http.response.body", "body": b"abc", "more_body": True})
        await send({"type": "http.response.body", "body": b"de"})

    middleware = AccessMiddleware(app, log=log, ids=RequestIds(), routes=INFERENCE_ROUTES)
    chunks = iter([b"12", b"345", b""])
    for n in range(2):
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            body = next(chunks, b"")
            return {"type": "http.request", "body": body, "more_body": bool(body)}

        async def send(message: dict[str, Any], sent: list[Any] = sent) -> None:
            sent.append(message)

        scope = {
            "type": "http",
            "method": "POST",
            "path": "/x",
            "client": ("127.0.0.1", 1),
            "headers": [(b"x-request-id", f"client-{n}".encode())],
        }
        await middleware(scope, receive, send)
        assert sent[0]["headers"] == [
            (b"content-type", b"text/plain"),
            (b"x-request-id", f"client-{n}".encode()),
        ]
    assert HEADERS == [(b"content-type", b"text/plain"), (b"X-Request-ID", b"the-models")]
    assert [(line.id, line.status, line.bytes_in, line.bytes_out) for line in lines] == [
        ("client-0", 201, 5, 5),
        ("client-1", 201, 0, 5),
    ]


async def test_the_line_head_and_the_peer_made_once_are_those_of_each_request() -> None:
    """``_describe`` keeps each method and path's ``protocol route "method path"`` and the last
    connection's peer text: the lines say each request's own, as made afresh."""
    log = _Log(True)
    lines = log.lines_written

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        pass

    middleware = AccessMiddleware(app, log=log, ids=RequestIds(), routes=INFERENCE_ROUTES)
    one, other = ("10.0.0.1", 5000), ("10.0.0.2", 6000)
    asked = [
        (one, "POST", "/v2/models/echo/infer"),
        (one, "POST", "/v2/models/echo/infer"),  # the same connection: one client tuple
        (other, "POST", "/v2/models/echo/infer"),
        (("10.0.0.1", 5000), "GET", '/no/"such"'),  # an equal tuple, not the same one
        (one, "GET", "/v2/health/ready"),
        (one, "POST", "/v2/health/ready"),  # another method: no route (a 405)
    ]
    for client, method, path in asked:
        scope = {"type": "http", "method": method, "path": path, "client": client, "headers": []}
        await middleware(scope, receive, send)
    for access in lines:
        access.describe(access)
    heads = [str(access).split(" 200 ")[0] for access in lines]
    assert heads == [
        '10.0.0.1:5000 oip_rest modelInfer "POST /v2/models/echo/infer"',
        '10.0.0.1:5000 oip_rest modelInfer "POST /v2/models/echo/infer"',
        '10.0.0.2:6000 oip_rest modelInfer "POST /v2/models/echo/infer"',
        '10.0.0.1:5000 - - "GET /no/\\"such\\""',
        '10.0.0.1:5000 oip_rest serverReady "GET /v2/health/ready"',
        '10.0.0.1:5000 - - "POST /v2/health/ready"',
    ]
    for access in lines:  # the head kept is what the fields would make
        kept = str(access)
        access.head = None
        assert str(access) == kept


async def test_a_written_access_holds_nothing_of_the_requests_connection() -> None:
    """The request's Access is its ``receive`` and ``send`` while it is served; its line is made
    later (up to the log thread's interval), so the server's pair (which hold the connection's
    request cycle and body) are let go when the request ends: served, failed, or refused for a
    bad header."""
    import gc
    import weakref

    log = _Log(True)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})
        if scope["path"] == "/fails":
            raise RuntimeError("after the response")

    middleware = AccessMiddleware(app, log=log, ids=RequestIds(), routes=INFERENCE_ROUTES)

    class _Cycle:  # what uvicorn's receive and send are bound to
        async def receive(self) -> dict[str, Any]:
            return {"type": "http.request", "body": b"abc", "more_body": False}

        async def send(self, message: dict[str, Any]) -> None:
            pass

    for path, headers in (
        ("/x", []),
        ("/fails", []),
        ("/x", [(b"x-podium-priority", b"high")]),  # refused: 400 from the middleware
    ):
        cycle = _Cycle()
        gone = weakref.ref(cycle)
        scope = {"type": "http", "method": "POST", "path": path, "client": None}
        scope["headers"] = headers
        try:
            await middleware(scope, cycle.receive, cycle.send)
        except RuntimeError:
            assert path == "/fails"
        del cycle
        gc.collect()
        assert gone() is None, path
    assert [(access.status, access.bytes_in, access.bytes_out) for access in log.lines_written] == [
        (200, 3, 2),
        (200, 3, 2),
        (400, 0, 0),  # (refused before the app: its bytes are not counted)
    ]


async def test_a_whole_response_sent_to_the_accesss_own_send_is_what_its_wrappers_would_send() -> (
    None
):
    """``send_body`` given the access middleware's own ``send`` has the access do its part once
    (``HttpAccess.whole``) and sends to the server's ``send``; through any other wrapper it goes
    message by message through the access's ``send``. Both send the same messages, with one
    ``X-Request-ID`` (ours: a model's is left out), and note the same status and bytes."""
    from podium.server.http._responses import JSON, send_body

    log = _Log(True)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["path"] == "/wrapped":  # another wrapper between (as CORS or gzip would be)
            inner = send

            async def send(message: dict[str, Any]) -> None:
                await inner(message)

        model = {"X-Request-ID": "the-models", "x-custom": "1"} if scope["path"] != "/" else None
        await send_body(send, 201, JSON, b"abcd", model)

    middleware = AccessMiddleware(app, log=log, ids=RequestIds(), routes=INFERENCE_ROUTES)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    sent: dict[str, list[dict[str, Any]]] = {}
    for path in ("/", "/own", "/wrapped"):
        messages = sent[path] = []

        async def send(message: dict[str, Any], messages: list[Any] = messages) -> None:
            messages.append(message)

        headers = [(b"x-request-id", b"client-1")]
        scope = {"type": "http", "method": "POST", "path": path, "client": None}
        await middleware({**scope, "headers": headers}, receive, send)
    assert sent["/own"] == sent["/wrapped"]
    assert sent["/own"] == [
        {
            "type": "http.response.start",
            "status": 201,
            "headers": [
                (b"content-type", b"application/json"),
                (b"x-custom", b"1"),
                (b"content-length", b"4"),
                (b"x-request-id", b"client-1"),
            ],
        },
        {"type": "http.response.body", "body": b"abcd"},
    ]
    assert sent["/"][0]["headers"] == [
        (b"content-type", b"application/json"),
        (b"content-length", b"4"),
        (b"x-request-id", b"client-1"),
    ]
    assert JSON == [(b"content-type", b"application/json")]  # the constant is left alone
    assert [(line.status, line.bytes_out) for line in log.lines_written] == [(201, 4)] * 3
