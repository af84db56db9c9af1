"""One bridged call: what its coroutine handler sees (:class:`LoopContext`) and the state its
gRPC thread and the loop share (:class:`Call`)."""

from __future__ import annotations

import asyncio
import inspect
import queue
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import grpc

from ._streams import END, WINDOW

if TYPE_CHECKING:
    from ._relay import Outbox, Relay

__all__ = ["Aborted", "Call", "LoopContext", "Status"]

#: What a call ends with for the exception its handler raised: the status code and details
#: (the server passes :func:`podium.server.grpc._errors.status_of`, the one mapping).
Status = Callable[[BaseException], tuple[grpc.StatusCode, str]]


class Aborted(grpc.aio.AbortError):
    """How :meth:`LoopContext.abort` ends a handler: the call ends with ``code`` and
    ``details``, set by the gRPC thread (a ``grpc.aio.AbortError``, as handlers expect)."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


class LoopContext:
    """What a coroutine handler sees of a call served by a gRPC thread.

    It offers the methods of ``grpc.aio.ServicerContext`` that Podium's handlers use, with the
    same meaning; the ones that touch the call itself are thread-safe in grpcio and are called
    directly.
    """

    __slots__ = ("_context", "_call", "_done_callbacks")

    def __init__(self, context: grpc.ServicerContext, call: Call) -> None:
        self._context = context
        self._call = call
        self._done_callbacks: list[Callable[[Any], None]] | None = None

    def invocation_metadata(self) -> Any:
        return self._context.invocation_metadata()

    def peer(self) -> str:
        return self._context.peer()

    async def abort(self, code: grpc.StatusCode, details: str = "") -> None:
        raise Aborted(code, details)

    async def send_initial_metadata(self, metadata: Any) -> None:
        self._context.send_initial_metadata(metadata)

    def set_trailing_metadata(self, metadata: Any) -> None:
        self._context.set_trailing_metadata(metadata)

    async def write(self, message: Any) -> None:
        await self._call.put(message)

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        """Call ``callback(self)`` on the loop once the call has ended, for whatever reason."""
        if self._done_callbacks is None:
            self._done_callbacks = []
        if self._call.ended:
            self._call.loop.call_soon(callback, self)
        else:
            self._done_callbacks.append(callback)

    def _ended(self) -> None:
        for callback in self._done_callbacks or ():
            callback(self)


class Call:
    """One call's state, shared by its gRPC thread and the loop."""

    __slots__ = (
        "loop",
        "task",
        "ended",
        "gone",
        "result",
        "error",
        "_done",
        "_items",
        "_written",
        "_taken",
        "_waiting",
        "_space",
        "context",
        "_relay",
        "_outbox",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        context: grpc.ServicerContext,
        relay: Relay | None = None,
        *,
        waits: bool = True,
    ) -> None:
        self.loop = loop
        self.task: asyncio.Task[Any] | None = None
        self.ended = False  # the handler finished (on the loop)
        self.gone = False  # the RPC ended for the client before the handler did
        self.result: Any = None
        self.error: BaseException | None = None
        self._done: threading.Lock | None = None
        if relay is None and waits:  # the gRPC thread waits on this lock for the loop
            self._done = threading.Lock()
            self._done.acquire()
        self._items: queue.SimpleQueue[Any] | None = None
        self._written = 0  # messages put (loop side)
        self._taken = 0  # messages taken (thread side)
        self._waiting = False  # the loop waits for room in the window
        self._space: asyncio.Future[None] | None = None
        self.context = LoopContext(context, self)
        self._relay = relay  # a relayed unary call: the sender thread ends it (see _finish)
        self._outbox: Outbox | None = None  # a relayed stream's way out

    # -- the gRPC thread -------------------------------------------------------------------

    def on_rpc_end(self) -> None:
        """grpc's termination callback (any thread): cancel the handler if it still runs."""
        if not self.ended:
            self.gone = True
            self.loop.call_soon_threadsafe(self._cancel)

    def wait(self, status: Status) -> Any:
        """Block until the handler ends; its result, or end the call with ``status`` of the
        handler's error (raises, as ``context.abort`` does)."""
        assert self._done is not None
        self._done.acquire()
        try:
            return self._outcome(status)
        finally:
            self._forget()

    def _outcome(self, status: Status) -> Any:
        error = self.error
        if error is None:
            return self.result
        code, details = status(error)
        self.context._context.abort(code, details)  # raises
        raise error  # pragma: no cover - only where a context's abort returns

    def items(self, status: Status) -> Iterator[Any]:
        """The messages the handler writes, as a blocking iterator for grpc; the status of its
        error (:meth:`wait`) after the last."""
        items = self._items
        assert items is not None
        while True:
            item = items.get()
            if item is END:
                try:
                    self._outcome(status)
                finally:
                    self._forget()
                return
            self.took_one()
            yield item

    def took_one(self) -> None:
        """A message has left (any thread but the loop's)."""
        self._taken += 1
        # Wake a loop waiting for room only once half the window is free: one wake-up per
        # WINDOW // 2 messages, not one per message, when the client is the slower side.
        if self._waiting and self._written - self._taken <= WINDOW // 2:
            self._waiting = False
            self.loop.call_soon_threadsafe(self._wake)

    # -- the loop --------------------------------------------------------------------------

    def start_with(self, behavior: Callable[..., Any], request: Any) -> None:
        """Start ``behavior(request, context)``, made here on the loop (a streaming one when
        the call has an outbox)."""
        if self.gone:
            self._finish(None, asyncio.CancelledError())
            return
        handler = behavior(request, self.context)
        self.start(handler if self._outbox is None else self.run_stream(handler))

    def start(self, coroutine: Any) -> None:
        if self.gone:
            coroutine.close()
            self._finish(None, asyncio.CancelledError())
            return
        self.task = self.loop.create_task(self._run(coroutine))

    async def _run(self, coroutine: Any) -> None:
        try:
            result = await coroutine
        except BaseException as exc:  # handed to the gRPC thread, which raises it there
            self._finish(None, exc)
            if not isinstance(exc, Exception | asyncio.CancelledError):
                raise
        else:
            self._finish(result, None)

    async def run_stream(self, agen_or_coroutine: Any) -> None:
        """Run a streaming handler: an async generator's items are written one by one."""
        if inspect.isasyncgen(agen_or_coroutine):
            try:
                async for item in agen_or_coroutine:
                    await self.put(item)
            finally:
                await agen_or_coroutine.aclose()
        else:
            await agen_or_coroutine

    def _finish(self, result: Any, error: BaseException | None) -> None:
        self.result = result
        self.error = error
        self.ended = True
        self.context._ended()
        if self._relay is not None:
            self._relay.finish(self.context._context, result, error)
            self._forget()  # the sender thread has what it needs
            return
        if self._outbox is not None:
            self._outbox.finish(error)
            self._forget()  # the outbox has what it needs
            return
        if self._items is not None:
            self._items.put(END)
        assert self._done is not None
        self._done.release()

    def _forget(self) -> None:
        """The call is over on every side: drop what it holds. It and its context refer to each
        other, and the task's context refers to the context (the access line's): without this
        the call, its messages and grpc's state for it would wait for a garbage collection."""
        self.result = None
        self.error = None
        self.task = None
        self.context = None  # type: ignore[assignment]
        self._outbox = None

    def _cancel(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()

    def open_stream(self) -> None:
        self._items = queue.SimpleQueue()

    async def put(self, message: Any) -> None:
        """Hand one message on (to the gRPC thread, or to the outbox of a relayed stream);
        wait while :data:`WINDOW` have not left."""
        if self._written - self._taken >= WINDOW:
            self._space = self.loop.create_future()
            self._waiting = True
            if self._written - self._taken >= WINDOW:  # still full: the thread will wake us
                await self._space
            else:
                self._waiting = False
        self._written += 1
        if self._outbox is not None:
            self._outbox.put(message)
            return
        assert self._items is not None
        self._items.put(message)

    def _wake(self) -> None:
        space = self._space
        if space is not None and not space.done():
            space.set_result(None)
