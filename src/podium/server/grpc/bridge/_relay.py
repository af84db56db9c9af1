"""The relay: calls served through grpcio's internals, holding no thread.

What the loop hands on to grpc (:class:`Sender`: on the serving loop's thread between two polls,
else on a sender thread) ends relayed unary calls
(:class:`Relay`) and starts the sends of idle response streams (:class:`Outbox`); grpc's
polling thread receives the messages of request streams (:class:`Inbox`, a buffer the handler
reads with ``async for``) and starts each next send of a busy response stream. Both ways at
most :data:`WINDOW` messages wait between the loop and grpc on one stream. Each talks to grpc
through the call's :class:`~._serving.ServedCall` (the serving loop's side of the call).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import queue
import threading
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import grpc

from .... import sched
from ....errors import InvalidInput
from ._internals import Internals, unparsable

if TYPE_CHECKING:
    from ._context import Call, Status
    from ._serving import ServedCall

__all__ = ["END", "WINDOW", "Failed", "Inbox", "Outbox", "Relay", "Sender"]

logger = logging.getLogger("podium.grpc")

#: Messages that may wait between the loop and grpc, either way, on one stream.
WINDOW = 16

#: The end of a request stream: the client has closed its side.
END = object()


class Failed:
    """Put in a request stream's buffer instead of a message: reading it raises ``exc``, once
    (a message that did not parse: the handler may read on), or ever after when ``final`` (the
    stream ended with it)."""

    __slots__ = ("exc", "final")

    def __init__(self, exc: BaseException, *, final: bool) -> None:
        self.exc = exc
        self.final = final


def _serialize_failed(context: ServedCall) -> None:
    # grpc's own words for an answer that does not serialize
    logger.exception("failed to serialize a gRPC response")
    context.set_code(grpc.StatusCode.INTERNAL)
    context.set_details("Failed to serialize response!")


def _set_status(context: ServedCall, status: Status, error: BaseException) -> None:
    code, details = status(error)
    context.set_code(code)
    context.set_details(details)


class Relay:
    """How a relayed unary call of one method ends: :meth:`finish` hands the outcome to the
    sender thread, which serializes the answer with the method's own serializer and sends it with
    the status, or sends the status alone for a failure (the sender's ``status`` of the error)."""

    __slots__ = ("render", "sender")

    def __init__(self, render: Callable[[Any], bytes] | None, sender: Sender) -> None:
        self.render = render
        self.sender = sender

    def finish(self, context: ServedCall, result: Any, error: BaseException | None) -> None:
        """On the loop: the handler has ended."""
        self.sender.put((self.end, context, result, error))

    def end(self, context: ServedCall, result: Any, error: BaseException | None) -> None:
        """On the sender thread: end the call."""
        payload: bytes | None = None
        if error is None:
            try:
                payload = result if self.render is None else self.render(result)
            except Exception:
                _serialize_failed(context)
        else:
            _set_status(context, self.sender.status, error)
        context.send_status(payload)


class Outbox:
    """A relayed stream's messages on their way out, one send at a time. The sender thread
    starts a send when the stream was idle; from then on grpc's polling thread starts the next
    one as each completes, so a busy stream costs no thread wake-up per message. The status
    goes after the last message."""

    __slots__ = ("call", "context", "render", "sender", "_lock", "_queue", "_busy")

    def __init__(
        self,
        call: Call,
        context: ServedCall,
        render: Callable[[Any], bytes] | None,
        sender: Sender,
    ) -> None:
        self.call: Call | None = call  # until the stream is over (_close)
        self.context = context
        self.render = render
        self.sender = sender
        self._lock = threading.Lock()
        self._queue: collections.deque[Any] = collections.deque()
        self._busy = False  # a send is in flight, or the sender thread will start one

    def put(self, message: Any) -> None:
        """On the loop: one more message."""
        self._add(message)

    def finish(self, error: BaseException | None) -> None:
        """On the loop: the handler has ended; the status follows the messages."""
        self._add(_Ending(error))

    def _add(self, item: Any) -> None:
        with self._lock:
            self._queue.append(item)
            if self._busy:
                return
            self._busy = True
        self.sender.put((self.pump,))

    def pump(self) -> None:
        """Send the next message, or the status (the sender thread or grpc's polling thread)."""
        with self._lock:
            if not self._queue:
                self._busy = False
                return
            item = self._queue.popleft()
        context = self.context
        if isinstance(item, _Ending):
            self._close()
            if item.error is not None:
                _set_status(context, self.sender.status, item.error)
            context.send_status(None)
            return
        try:
            payload = item if self.render is None else self.render(item)
        except Exception:
            self._close()
            _serialize_failed(context)
            context.send_status(None)
            return
        if not context.send(payload, self._sent):
            self._close()  # the call is over: its handler is being cancelled

    def _sent(self, still_open: bool) -> None:
        call = self.call
        if call is not None:
            call.took_one()
        if still_open:
            self.pump()
        else:
            self._close()

    def _close(self) -> None:
        with self._lock:
            self._queue.clear()
            self._busy = True  # nothing is sent any more
        self.call = None  # (it refers to this outbox: no cycle left for the collector)


class _Ending:
    __slots__ = ("error",)

    def __init__(self, error: BaseException | None) -> None:
        self.error = error


class Inbox:
    """A relayed call's request stream as an async iterator over a buffer that grpc's polling
    thread fills, receiving one message after another, up to :data:`WINDOW` ahead of the
    handler (back-pressure reaches the client through HTTP/2 flow control); the sender thread
    asks again once the handler has read half of them. The loop is woken only when the handler
    waits for a message."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        context: ServedCall,
        parse: Callable[[bytes], Any] | None,
        sender: Sender,
    ) -> None:
        self._loop = loop
        self._buffer: collections.deque[Any] = collections.deque()
        self._arrived: asyncio.Future[None] | None = None
        self._waiting = False
        self._context = context
        self.parse = parse  # what the call parses each message with, before on_message
        self._sender = sender
        self._lock = threading.Lock()
        self._paused = False

    def receive(self) -> None:
        """Ask for the next message (grpc's polling thread, or the sender thread)."""
        self._context.receive_next()

    # -- what the call hands over (grpc's polling thread, or at once in receive) -----------

    def on_unparsable(self, exc: Exception) -> None:
        # The handler gets InvalidInput for this message, once, and may read on.
        self.on_message(Failed(InvalidInput(unparsable(exc)), final=False))

    def on_message(self, message: Any) -> None:
        self._push(message)
        with self._lock:
            if len(self._buffer) >= WINDOW:
                self._paused = True
                return
        self.receive()

    def on_end(self, error: BaseException | None) -> None:
        self._push(END if error is None else Failed(error, final=True))

    def _push(self, entry: Any) -> None:
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
        """The next message; raises at the end (and ever after) or for a failed one."""
        if not self._buffer:
            self._arrived = self._loop.create_future()
            self._waiting = True
            if not self._buffer:
                await self._arrived
            else:
                self._waiting = False
        message = self._buffer.popleft()
        if message is END:  # nothing is received after an end: nothing to resume
            self._buffer.appendleft(END)
            raise StopAsyncIteration
        if isinstance(message, Failed) and message.final:
            self._buffer.appendleft(message)
            raise message.exc
        with self._lock:
            resume = self._paused and len(self._buffer) <= WINDOW // 2
            if resume:
                self._paused = False
        if resume:
            self._sender.put((self.receive,))
        if isinstance(message, Failed):
            raise message.exc
        return message


class Sender:
    """Runs what the loop hands on to grpc (ending relayed unary calls, starting the sends of idle
    relayed streams, asking a paused inbox for more) on a thread that is already awake where it
    can, or on a thread of its own.

    Sending enters grpc's C core, which lets go of the GIL. With several CPUs, doing it on the
    loop would hand the GIL to grpc's polling thread on every call and wait to get it back, a
    thread switch per call on the loop's critical path (half the throughput, bench/RESULTS.md
    section 9), and the C core's work would take the loop's CPU from Python. So the loop only
    queues the work, ``(function, *args)`` (:meth:`put`), and:

    - the relay's serving loop (:mod:`._serving`) runs what is queued after each event it takes
      and before it polls again: work handed on while it is awake wakes no thread;
    - while it waits in its poll, the work is run by this sender's own thread, woken for it.
      Even where the process may run on one CPU only, the loop does not run it itself: it
      saves switches, but the loop then pays each call's send alone where the sender,
      under ``SCHED_BATCH``, sends several at once when the loop blocks (unary calls/s fell
      by 40 %, section 66).

    A call whose handler raised ends with ``status(error)``.
    """

    def __init__(self, internals: Internals, status: Status) -> None:
        self.internals = internals
        self.status = status
        #: What was handed on and has not run yet (oldest first).
        self.queued: collections.deque[tuple[Any, ...]] = collections.deque()
        #: True while no serving loop is between two polls (it waits in one, or none runs):
        #: then what is put wakes this sender's thread. Set by
        #: the serving loop's thread only.
        self.polling = True
        self._wake: queue.SimpleQueue[bool] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="podium-grpc-send", daemon=True)
        self._thread.start()

    def put(self, item: tuple[Any, ...]) -> None:
        """Hand ``(function, *args)`` on (any thread, the loop's above all): the serving loop
        runs it before it polls again; if it is polling, it wakes the sender's
        thread (see the class's docstring). Items run in the order they were put; two threads
        may run two of them at once, never two for one thing (a unary call's ending, an outbox's
        pump and an inbox's receive are each in the queue once at most, and take their call's
        lock).

        The serving loop sets :attr:`polling` before it looks at the queue a last time, and
        this reads it after adding to the queue, so one of the two always sees the item (the
        GIL orders the four steps)."""
        self.queued.append(item)
        if self.polling:
            self._wake.put(True)

    def run_queued(self) -> None:
        """Run what is queued, in order (the serving loop's thread, or the sender's own)."""
        work = self.queued
        while work:
            try:
                item = work.popleft()
            except IndexError:  # the other thread took the last one
                return
            try:
                item[0](*item[1:])
            except Exception:  # that call is lost; the sender must go on for the others
                logger.exception("failed to end a gRPC call")

    def _run(self) -> None:
        sched.batch_this_thread()  # woken by the loop, which holds the GIL (sched.py)
        while True:
            going_on = self._wake.get()
            self.run_queued()
            if not going_on:
                return

    def close(self) -> None:
        """Stop once everything queued so far is done."""
        self._wake.put(False)
        self._thread.join(timeout=5)
