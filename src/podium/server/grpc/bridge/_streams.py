"""Stream messages between a gRPC thread and the loop: the window that bounds them, the one
end-of-stream sentinel, and a client's request stream as an async iterator.

:class:`Requests` is a buffer that another thread fills and the handler reads with
``async for``; the loop is woken only when the handler waits. Two threads fill it: grpc's polling
thread for a relayed call (:class:`~._relay.Inbox`), or a reader thread pulling grpc's blocking
request iterator (:class:`RequestReader`, the blocking way).
"""

from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc

__all__ = ["END", "WINDOW", "Failed", "RequestReader", "Requests"]

#: Messages that may wait between the loop and a gRPC thread, either way, on one stream.
WINDOW = 16

#: The end of a stream, either way: the client closed its request stream, or the handler has
#: written its last message. The one sentinel of the bridge.
END = object()


class Failed:
    """A request stream that ended with ``exc`` (put in the buffer instead of a message)."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class Requests:
    """A request stream as an async iterator over a buffer that another thread fills
    (:meth:`push`); the loop is woken only when the handler waits for a message."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._buffer: collections.deque[Any] = collections.deque()
        self._arrived: asyncio.Future[None] | None = None
        self._waiting = False

    def push(self, entry: Any) -> None:
        """A message, :data:`END` or a :class:`Failed` (any thread but the loop's)."""
        self._buffer.append(entry)
        if self._waiting:
            self._waiting = False
            self._loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        arrived = self._arrived
        if arrived is not None and not arrived.done():
            arrived.set_result(None)

    def __aiter__(self) -> AsyncIterator[Any]:
        return self

    async def __anext__(self) -> Any:
        return await self.take()

    async def take(self) -> Any:
        """The next message; raises at the end (and ever after) or for a failed stream."""
        if not self._buffer:
            self._arrived = self._loop.create_future()
            self._waiting = True
            if not self._buffer:
                await self._arrived
            else:
                self._waiting = False
        message = self._buffer.popleft()
        if message is END:
            self._buffer.appendleft(END)
            raise StopAsyncIteration
        if isinstance(message, Failed):
            self._buffer.appendleft(message)
            if isinstance(message.exc, grpc.RpcError):  # the call ended under the handler
                raise asyncio.CancelledError()
            raise message.exc
        return message


class RequestReader(Requests):
    """A client's request stream, read by a thread of its own, as an async iterator (the
    blocking way).

    grpc's request iterator blocks; the reader thread pulls at most :data:`WINDOW` messages
    ahead of the handler (back-pressure reaches the client through HTTP/2 flow control).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, requests: Iterator[Any]) -> None:
        super().__init__(loop)
        self._requests = requests
        self._room = threading.Semaphore(WINDOW)
        self._closed = False

    def read(self) -> None:
        """The reader thread's loop."""
        try:
            for message in self._requests:
                self._room.acquire()
                if self._closed:
                    return
                self.push(message)
            self.push(END)
        except BaseException as exc:  # the call was cancelled, or a message failed to parse
            self.push(Failed(exc))

    def close(self) -> None:
        self._closed = True
        self._room.release(WINDOW)

    async def __anext__(self) -> Any:
        message = await self.take()
        self._room.release()
        return message
