"""The physical reference: a pure ASGI callable that answers every request with 200 "hello".

No framework, no routing, no body parsing. Served by granian and by uvicorn, it measures what
each HTTP server can do on this machine with no application work at all, so a model server's
figure can be read as a fraction of that ceiling.
"""

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_BODY = b"hello"
_START: Message = {
    "type": "http.response.start",
    "status": 200,
    "headers": [
        (b"content-type", b"text/plain"),
        (b"content-length", str(len(_BODY)).encode()),
    ],
}
_RESPONSE: Message = {"type": "http.response.body", "body": _BODY}


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    """Answer 200 "hello" to every HTTP request; complete lifespan start-up and shut-down."""
    if scope["type"] == "http":
        await send(_START)
        await send(_RESPONSE)
    elif scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return


_JSON_HEADERS = [(b"content-type", b"application/json")]


async def echo_app(scope: Scope, receive: Receive, send: Send) -> None:
    """The same with a body: read a POST's body and answer it as it came (a JSON echo, with no
    parsing): the least any server that answers with what it was sent can do."""
    if scope["type"] != "http":
        await app(scope, receive, send)
        return
    body = b""
    more = True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    headers = [*_JSON_HEADERS, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
