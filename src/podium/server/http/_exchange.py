"""One HTTP exchange: the body (bounded), the raw request object, and client-disconnect watching.

After the body is read, a watcher task is the only reader of the server's ``receive``: it notices
``http.disconnect`` at once and cancels the task serving the request, which closes a model's
generator or cancels its coroutine. The model's own ``starlette.requests.Request`` reads through
this exchange, so ``await request.body()`` still works after Podium has read the body, and
``await request.is_disconnected()`` turns true as soon as the client leaves.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from types import MethodType
from typing import Any

from ...errors import InvalidInput, PayloadTooLarge, PodiumError
from ...turn import running_loop
from .._asgi import Message, Receive, Scope, Send
from .._limits import LOST_HOOK
from ._access import HttpAccess

_DISCONNECT: Message = {"type": "http.disconnect"}


class Exchange:
    __slots__ = (
        "scope",
        "_receive",
        "_limit",
        "_body",
        "_chunks",
        "_body_done",
        "_replayed",
        "_size",
        "_arrived",
        "disconnected",
        "failure",
        "_gone",
        "_watcher",
        "_pending",
        "task",
        "_loop",
        "_hook",
        "_request",
        "errors",
        "_counted",
    )

    def __init__(self, scope: Scope, receive: Receive, limit: int) -> None:
        self.scope = scope
        #: where the body's bytes are counted (the access line's ``in=``): given the access
        #: middleware's counting ``receive``, the server's own is read from under it and the
        #: bytes counted here, where they are read anyway (HttpAccess: no coroutine of its own
        #: for each receive()); else None (nothing to count, or counted by another wrapper)
        self._counted: HttpAccess | None = None
        if type(receive) is MethodType:  # (a bound method: no failed look-up for a function)
            counted = receive.__self__
            if type(counted) is HttpAccess and counted._receive is not None:
                self._counted = counted
                receive = counted._receive
        self._receive = receive
        self._limit = limit
        self._body: bytes | None = None
        self._chunks: list[bytes] = []
        self._body_done = False
        self._replayed = False
        self._size = 0
        self._arrived: asyncio.Event | None = None
        self.disconnected = False
        self.failure: PayloadTooLarge | None = None
        self._gone: asyncio.Event | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._pending: asyncio.Handle | None = None
        #: the task serving the request, from watch() to close() (the data plane registers the
        #: call in flight under it: no second look-up of the current task)
        self.task: asyncio.Task[Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # set by watch()
        self._hook: Any = None  # the connection's LostHook we wait on (watch())
        self._request: Any = None
        #: How this request's errors are answered when not as the listener's default (set by
        #: the handlers of routes whose protocol has its own error shape: Truss's).
        self.errors: Callable[[Send, PodiumError], Awaitable[None]] | None = None

    def header(self, name: bytes) -> bytes | None:
        for key, value in self.scope["headers"]:
            if key == name:
                return value
        return None

    def check_length(self, find: bytes = b"") -> bytes | None:
        """Refuse a declared ``Content-Length`` over the limit before reading anything. Answers
        the header ``find`` (any but ``Content-Length`` itself) as :meth:`header` would, found
        on the same walk over the headers: a handler's next question (OIP's binary header, the
        content type) costs no second walk and no second call."""
        declared = found = None
        for key, value in self.scope["headers"]:  # (header()'s loop: no call per request)
            if key == b"content-length":
                if declared is None:
                    declared = value
            elif key == find and found is None:
                found = value
        if declared is not None:
            try:
                size = int(declared)
            except ValueError:
                raise InvalidInput(f"Content-Length header is not a number: {declared!r}") from None
            if size > self._limit:
                raise PayloadTooLarge(
                    f"request body of {size} bytes exceeds the limit of {self._limit} bytes "
                    "(--max-request-size)"
                )
        return found

    def _add(self, chunk: bytes) -> None:
        size = len(chunk)
        self._size += size
        if self._counted is not None:
            self._counted.bytes_in += size
        if self._size > self._limit:
            raise PayloadTooLarge(
                f"request body exceeds the limit of {self._limit} bytes (--max-request-size)"
            )
        if chunk:
            self._chunks.append(chunk)

    async def body(self) -> bytes:
        """The whole body, read once; ``PayloadTooLarge`` past the limit."""
        if self._body is not None:
            return self._body
        if self._pending is not None:
            self._promote()
        if self._watcher is None:
            while not self._body_done:
                message = await self._receive()
                if message["type"] == "http.disconnect":
                    self._lost()
                    raise asyncio.CancelledError
                self._add(message.get("body", b""))
                self._body_done = not message.get("more_body", False)
        else:
            while not self._body_done:
                await self._wait_arrival()
        self._body = b"".join(self._chunks) if len(self._chunks) != 1 else self._chunks[0]
        self._chunks = []
        if self._request is not None:
            self._request._body = self._body  # starlette's cache: body()/json() never re-read
        return self._body

    async def _wait_arrival(self) -> None:
        if self.failure is not None:
            raise self.failure
        if self.disconnected:
            raise asyncio.CancelledError
        if self._arrived is None:
            self._arrived = asyncio.Event()
        self._arrived.clear()
        await self._arrived.wait()

    # -- disconnect watching ---------------------------------------------------------------

    def watch(self) -> None:
        """Start watching for the client leaving; cancel the current task when it does.

        Once the body is read, on Podium's own listeners, the connection says it: the request's
        ``LostHook`` (``server/_limits.py``) calls back when the connection is lost, and no
        task waits for ``http.disconnect``. Else (a body still to come, another HTTP server) a
        watcher task reads ``receive()``, started on the loop's next turn: a request that
        completes without ever yielding to the loop (a fast async model) never pays for a task
        it cannot use.
        """
        hook = self.scope.get(LOST_HOOK)
        if hook is not None and self._body_done and self._watcher is None:
            # the task serving the request, as the connection started it: no look-up
            task = hook.task
            self.task = task if task is not None else asyncio.current_task(running_loop())
            self._hook = hook
            hook.callback = self._lost
            return
        loop = self._loop = running_loop()  # (no getpid: see running_loop)
        self.task = asyncio.current_task(loop)  # (with the loop: no second look-up)
        self._pending = loop.call_soon(self._start_watcher)

    def _start_watcher(self) -> None:
        self._pending = None
        loop = self._loop
        assert loop is not None  # watch() came first
        self._watcher = loop.create_task(self._watch())

    def _promote(self) -> None:
        """Start a scheduled watcher now: once it may run, it must be the only reader."""
        if self._pending is not None:
            self._pending.cancel()
            self._start_watcher()

    def close(self) -> None:
        """The request has been answered (or has failed): stop watching, and let go of the
        model's request object and the task, which refer back to this exchange (no cycle
        left for the garbage collector)."""
        if self._hook is not None:
            self._hook.callback = None
            self._hook = None
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None
        if self._watcher is not None:
            self._watcher.cancel()
            self._watcher = None
        self._request = None
        self.task = None

    async def _watch(self) -> None:
        try:
            while True:
                message = await self._receive()
                if message["type"] == "http.disconnect":
                    self._lost()
                    return
                if not self._body_done:
                    self._add(message.get("body", b""))
                    self._body_done = not message.get("more_body", False)
                    if self._arrived is not None:
                        self._arrived.set()
        except PayloadTooLarge as exc:
            # The client is still there and gets a 413: the task serving it is stopped, and the
            # front end answers with ``failure`` instead of treating it as a disconnect.
            self.failure = exc
            if self._arrived is not None:
                self._arrived.set()
            if self.task is not None:
                self.task.cancel()

    def _lost(self) -> None:
        self.disconnected = True
        if self._gone is not None:
            self._gone.set()
        if self._arrived is not None:
            self._arrived.set()
        if self.task is not None and self.task is not asyncio.current_task():
            self.task.cancel()

    # -- the model's view -------------------------------------------------------------------

    async def app_receive(self) -> Message:
        """``receive`` for the model's request object."""
        if self.disconnected:
            return _DISCONNECT
        self._promote()
        if self._body is not None:
            if not self._replayed:
                self._replayed = True
                return {"type": "http.request", "body": self._body, "more_body": False}
        elif self._watcher is not None:
            while not self._chunks and not self._body_done:
                await self._wait_arrival()
            if self._chunks or not self._replayed:
                chunk = b"".join(self._chunks)
                self._chunks = []
                self._replayed = self._body_done
                return {"type": "http.request", "body": chunk, "more_body": not self._body_done}
        else:
            message = await self._receive()
            if self._counted is not None:
                self._counted.bytes_in += len(message.get("body", b""))
            return message
        if self._gone is None:
            self._gone = asyncio.Event()
        await self._gone.wait()
        return _DISCONNECT

    def request(self) -> Any:
        """The ``starlette.requests.Request`` handed to models (created on first use)."""
        if self._request is None:
            from starlette.requests import Request

            self._request = Request(self.scope, self.app_receive)
            if self._body is not None:
                self._request._body = self._body
        return self._request
