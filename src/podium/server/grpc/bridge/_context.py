"""One relayed call: what its coroutine handler sees (:class:`LoopContext`) and the state grpc's
threads and the loop share (:class:`Call`)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

import grpc

from ._relay import WINDOW, Outbox, Relay

__all__ = ["Aborted", "Call", "LoopContext", "Status"]

#: What a call ends with for the exception its handler raised: the status code and details
#: (the server passes :func:`podium.server.grpc._errors.status_of`, the one mapping).
Status = Callable[[BaseException], tuple[grpc.StatusCode, str]]


class Aborted(grpc.aio.AbortError):
    """How :meth:`LoopContext.abort` ends a handler: the call ends with ``code`` and
    ``details`` (a ``grpc.aio.AbortError``, as handlers expect)."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


class LoopContext:
    """What a coroutine handler sees of a relayed call.

    It offers the methods of ``grpc.aio.ServicerContext`` that Podium's handlers use, with the
    same meaning; the ones that touch the call itself are thread-safe on the serving loop's side
    of the call (:class:`~._serving.ServedCall`) and are called directly.
    """

    __slots__ = ("_context", "_call", "_done_callbacks")

    def __init__(self, context: Any, call: Call) -> None:
        # the serving loop's side of the call (._serving.ServedCall)
        self._context = context
        self._call = call
        self._done_callbacks: list[Callable[[Any], None]] | None = None

    def invocation_metadata(self) -> Any:
        return self._context.invocation_metadata()

    def peer(self) -> str:
        return self._context.peer()

    def time_remaining(self) -> float | None:
        return self._context.time_remaining()

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
    """One relayed call's state, shared by grpc's threads and the loop.

    It ends one of two ways: a unary call through its :class:`~._relay.Relay`, a stream through
    its :class:`~._relay.Outbox` (the status after the last message)."""

    __slots__ = (
        "loop",
        "task",
        "ended",
        "gone",
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
        context: Any,
        relay: Relay | None,
    ) -> None:
        self.loop = loop
        self.task: asyncio.Task[Any] | None = None
        self.ended = False  # the handler finished (on the loop)
        self.gone = False  # the RPC ended for the client before the handler did
        self._written = 0  # messages put (loop side)
        self._taken = 0  # messages sent (grpc's side)
        self._waiting = False  # the loop waits for room in the window
        self._space: asyncio.Future[None] | None = None
        self.context = LoopContext(context, self)
        self._relay = relay  # a unary call: it is handed on to end (see _finish)
        self._outbox: Outbox | None = None  # a stream's way out

    # -- grpc's threads --------------------------------------------------------------------

    def on_rpc_end(self) -> None:
        """grpc's termination callback (any thread): cancel the handler if it still runs."""
        if not self.ended:
            self.gone = True
            self.loop.call_soon_threadsafe(self._cancel)

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
        coroutine = handler if self._outbox is None else self._run_stream(handler)
        self.task = self.loop.create_task(self._run(coroutine))

    async def _run(self, coroutine: Any) -> None:
        try:
            result = await coroutine
        except BaseException as exc:  # ends the call with its status
            self._finish(None, exc)
            if not isinstance(exc, Exception | asyncio.CancelledError):
                raise
        else:
            self._finish(result, None)

    async def _run_stream(self, agen_or_coroutine: Any) -> None:
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
        self.ended = True
        self.context._ended()
        if self._relay is not None:
            self._relay.finish(self.context._context, result, error)
        elif self._outbox is not None:
            self._outbox.finish(error)
        self._forget()  # what was handed on, or the outbox, has what it needs

    def _forget(self) -> None:
        """The call is over on every side: drop what it holds. It and its context refer to each
        other, and the task's context refers to the context (the access line's): without this
        the call, its messages and grpc's state for it would wait for a garbage collection."""
        self.task = None
        self.context = None  # type: ignore[assignment]
        self._outbox = None

    def _cancel(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()

    async def put(self, message: Any) -> None:
        """Hand one message to the outbox; wait while :data:`~._relay.WINDOW` have not left."""
        if self._written - self._taken >= WINDOW:
            self._space = self.loop.create_future()
            self._waiting = True
            if self._written - self._taken >= WINDOW:  # still full: grpc's thread will wake us
                await self._space
            else:
                self._waiting = False
        self._written += 1
        assert self._outbox is not None
        self._outbox.put(message)

    def _wake(self) -> None:
        space = self._space
        if space is not None and not space.done():
            space.set_result(None)
