"""What both HTTP apps answer to scopes that are not ``http`` (``server/_asgi.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from podium.server._asgi import Message, serve_other_scope


class Recorder:
    def __init__(self, *incoming: str) -> None:
        self.incoming = [{"type": t} for t in incoming]
        self.sent: list[Message] = []

    async def receive(self) -> Message:
        return self.incoming.pop(0)

    async def send(self, message: Message) -> None:
        self.sent.append(message)


@pytest.mark.anyio
async def test_the_lifespan_is_acknowledged_until_shutdown() -> None:
    io = Recorder("lifespan.startup", "lifespan.shutdown", "never read")
    await serve_other_scope({"type": "lifespan"}, io.receive, io.send)
    assert [m["type"] for m in io.sent] == [
        "lifespan.startup.complete",
        "lifespan.shutdown.complete",
    ]
    assert io.incoming == [{"type": "never read"}]


@pytest.mark.anyio
async def test_a_websocket_is_closed_as_unsupported() -> None:
    io = Recorder()
    await serve_other_scope({"type": "websocket", "path": "/"}, io.receive, io.send)
    assert io.sent == [{"type": "websocket.close", "code": 1003}]


@pytest.mark.anyio
async def test_an_unknown_scope_is_left_alone() -> None:
    io = Recorder()
    scope: dict[str, Any] = {"type": "something-new"}
    await serve_other_scope(scope, io.receive, io.send)
    assert io.sent == []
