"""One gRPC call as a model sees it: metadata as headers, and whether the client is still there.

A model that takes the raw request gets a ``starlette.requests.Request`` built from a synthetic
HTTP scope: method ``POST``, the path ``/<service>/<method>``, ``http_version`` ``"2"``, the call's
invocation metadata as headers (names lower-case, as gRPC sends them; ``-bin`` values as their
bytes), the peer as ``client``. Its body is what the front end passes (empty for OIP, whose
message is decoded into the inputs).

``await request.is_disconnected()`` turns true once the call is over for the client: the task
serving a call is cancelled (by grpc.aio, or by the relay) when the client
cancels it or its connection drops (which also
cancels the model's work, as an HTTP disconnect does), and a call that has ended has nobody
waiting either. ``context.cancelled()`` is not used: grpc.aio reports it only after the handler
has been cancelled, too late for a model that checks in its own ``except CancelledError``.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["GrpcCall"]

_DISCONNECT = {"type": "http.disconnect"}


class GrpcCall:
    """Per-call state shared by every model request object made for that call.

    Create it in the handler's own task (the one grpc.aio cancels). Request objects are made only
    by :meth:`request`, i.e. only for models whose ``needs_request``.
    """

    __slots__ = ("_context", "_path", "_task", "_gone", "_headers", "_client")

    def __init__(self, context: Any, path: str) -> None:
        self._context = context
        self._path = path
        self._task = asyncio.current_task()
        self._gone: asyncio.Event | None = None
        self._headers: list[tuple[bytes, bytes]] | None = None
        self._client: tuple[str, int] | None = None

    @property
    def disconnected(self) -> bool:
        """True once the client cancelled, went away, or the call ended."""
        if self._gone is not None and self._gone.is_set():
            return True
        task = self._task
        return task is not None and (task.cancelling() > 0 or task.done())

    def request(self, body: bytes = b"") -> Any:
        """A new ``starlette.requests.Request`` for this call, with ``body`` as its body."""
        from starlette.requests import Request

        if self._gone is None:
            self._gone = asyncio.Event()
            self._context.add_done_callback(self._ended)
            self._headers, self._client = self._describe()
        path = self._path
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "2",
            "method": "POST",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "root_path": "",
            "query_string": b"",
            "headers": list(self._headers or ()),
            "client": self._client,
            "server": None,
            "extensions": {"grpc": {"method": path}},
        }
        request = Request(scope, self._receive)
        request._body = body  # starlette's cache: body(), json() and stream() never call receive
        return request

    async def _receive(self) -> dict[str, Any]:
        # Only is_disconnected() (and code reading past the body) gets here: it answers at once
        # when the client is gone, else waits until it is.
        if not self.disconnected:
            gone = self._gone
            assert gone is not None
            await gone.wait()
        return _DISCONNECT

    def _ended(self, _: Any) -> None:
        if self._gone is not None:
            self._gone.set()

    def _describe(self) -> tuple[list[tuple[bytes, bytes]], tuple[str, int] | None]:
        headers = [
            (str(key).lower().encode("latin-1"), _header_value(value))
            for key, value in (self._context.invocation_metadata() or ())
        ]
        return headers, _peer(self._context.peer())


def _header_value(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    return str(value).encode("latin-1", "backslashreplace")


def _peer(peer: Any) -> tuple[str, int] | None:
    """``ipv4:127.0.0.1:5000`` / ``ipv6:[::1]:5000`` → ``(host, port)``; None if unknown."""
    if not isinstance(peer, str):
        return None
    kind, _, address = peer.partition(":")
    if kind not in ("ipv4", "ipv6"):
        return None
    host, _, port = address.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        return host, int(port)
    except ValueError:
        return None
