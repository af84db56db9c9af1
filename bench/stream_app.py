"""The streaming reference: a pure ASGI app that streams N Server-Sent Events, one send each.

Any POST reads N from the OIP body's first input (default 1000) and answers with N events
`data: {"outputs":[{"name":"output","shape":[1],"datatype":"INT64","data":[i]}]}` — the same
bytes a model server sends, with no model, no scheduling and no encoding library. Other
requests get 200 "ok" (readiness). Served by granian and by uvicorn, it is the ceiling of each
HTTP server for bench/stream.py, and shows whether the client could keep up.
"""

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

DEFAULT_N = 1000
_SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


async def _read_body(receive: Receive) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body", False):
            return body


def _count(body: bytes) -> int:
    try:
        data = json.loads(body)["inputs"][0]["data"]
        while isinstance(data, list):
            data = data[0]
        return int(data)
    except (ValueError, KeyError, IndexError, TypeError):
        return DEFAULT_N


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    body = await _read_body(receive)
    if scope["method"] != "POST":
        headers = [(b"content-type", b"text/plain"), (b"content-length", b"2")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"ok"})
        return
    await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
    prefix = b'data: {"outputs":[{"name":"output","shape":[1],"datatype":"INT64","data":['
    for i in range(_count(body)):
        event = prefix + str(i).encode() + b"]}]}\n\n"
        await send({"type": "http.response.body", "body": event, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})
