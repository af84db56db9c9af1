"""The relay's serving loop: grpc's completion queue polled by the relay itself, its relayed calls
(unary and streams) served below grpc's ``_server.py``.

grpc's ``_serve`` loop makes, for every call, a per-call state with a ``threading.Condition``, a
servicer context, a handler lookup through the generic handlers with its details object, a
submission to the method's executor, and passes every event through its
``_process_event_and_continue`` (bench/RESULTS.md, sections 52, 58 and 64). :func:`start` starts
a ``grpc.server`` with this loop in place of grpc's: the same server state (its lock, its stage,
the calls in flight, the tags due), so that ports, channelz, ``stop`` and its grace,
``cancel_all_calls`` and the end of serving are grpc's own, unchanged.

A relayed method (:class:`Method`, found once per method name through the generic handlers, as
grpc would, and remembered) is served here. A :class:`ServedCall` holds what grpc's per-call
state held (the status, the trailing metadata, whether the client closed its side or went, the
events due, behind one plain lock). On arrival it asks for the close (which says whether the
client cancelled) and the request: a unary call's or a response stream's one message, with which
the handler starts; a request stream's handler starts at once and its inbox asks for each next
message. A unary call ends with one batch handed on by the loop (the answer and the status: run
by this loop between two polls, or by the sender's thread, :class:`~._relay.Sender`); a
stream's messages leave through its outbox, one send at a time, and the status after the last.
Every other event (unknown methods, the shutdown, the completions of grpc's own calls) goes
through grpc's ``_process_event_and_continue`` as in grpc's loop. A call is over, for grpc's
server state, once no event is due and its status has been sent or its client is gone: exactly
when grpc would drop its own per-call state.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import grpc

from .... import sched
from ._context import Call
from ._internals import unparsable
from ._relay import Inbox, Outbox

if TYPE_CHECKING:
    from ._internals import Internals
    from ._relay import Relay, Sender

__all__ = ["Method", "ServedCall", "Serving", "start"]

logger = logging.getLogger("podium.grpc")

#: What one of this loop's tags returns while its call is not over (grpc's tags return
#: ``(per-call state or None, callbacks)``; the loop drops the state once it is returned).
_GOING_ON: tuple[None, tuple[()]] = (None, ())


class Method:
    """A relayed method, as the serving loop serves it: the coroutine ``behavior`` run on
    ``loop`` with the request (or the request stream, when ``requests``) parsed by ``parse``.
    A unary method ends through ``relay``; a response stream (``relay`` None) through an
    :class:`~._relay.Outbox` whose messages ``render`` serializes, sent by ``sender``."""

    __slots__ = ("loop", "behavior", "parse", "relay", "render", "sender", "requests")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        behavior: Callable[..., Any],
        parse: Callable[[bytes], Any] | None,
        *,
        relay: Relay | None,
        render: Callable[[Any], bytes] | None = None,
        sender: Sender | None = None,
        requests: bool = False,
    ) -> None:
        self.loop = loop
        self.behavior = behavior
        self.parse = parse
        self.relay = relay
        self.render = render
        self.sender = sender
        self.requests = requests


class ServedCall:
    """grpc's side of one relayed call served by this loop: what grpc's servicer context
    offers the relay (:class:`~._context.LoopContext` forwards to it), the status it ends with,
    the request messages it receives and the response messages it sends, and the events still
    due. ``lock`` orders what the loop hands on (the status, a stream's idle send, an inbox asking
    again: the sender's thread, or this loop's) against grpc's polling
    thread's completions and the client going.

    A unary call or a response stream receives one request message (its handler starts with
    it); a request stream's messages go to its :class:`~._relay.Inbox` one receive at a time.
    A stream's messages leave one send at a time (:meth:`send`, from its outbox)."""

    __slots__ = (
        "internals",
        "rpc_event",
        "call",
        "on_end",
        "lock",
        "due",
        "statused",
        "cancelled",
        "client_closed",
        "metadata_sent",
        "code",
        "details",
        "trailing_metadata",
        "method",
        "handler",
        "inbox",
        "on_sent",
    )

    def __init__(self, internals: Internals, rpc_event: Any) -> None:
        self.internals = internals
        self.rpc_event = rpc_event
        self.call = rpc_event.call
        self.on_end: Callable[[], None] | None = None  # the relay's Call.on_rpc_end
        self.lock = threading.Lock()
        self.due = 0  # batches started whose completion has not come yet
        self.statused = False  # the status batch is started
        self.cancelled = False  # the client is gone (cancelled, deadline, connection lost)
        self.client_closed = False  # the client closed its side of a request stream
        self.metadata_sent = False
        self.code: grpc.StatusCode | None = None
        self.details = b""
        self.trailing_metadata: Any = None
        self.method: Method | None = None  # until the one request message has come
        self.handler: Call | None = None  # (the same)
        self.inbox: Inbox | None = None  # a request stream's, until the call is over
        self.on_sent: Callable[[bool], None] | None = None  # while a stream's send is in flight

    # -- what the handler's context forwards to (any thread) --------------------------------

    def invocation_metadata(self) -> Any:
        return self.rpc_event.invocation_metadata

    def peer(self) -> str:
        return self.call.peer().decode("utf-8", "replace")

    def time_remaining(self) -> float:
        return max(self.rpc_event.call_details.deadline - time.time(), 0)

    def set_trailing_metadata(self, metadata: Any) -> None:
        self.trailing_metadata = metadata

    def set_code(self, code: grpc.StatusCode) -> None:
        self.code = code

    def set_details(self, details: str) -> None:
        self.details = details.encode("utf8")

    def send_initial_metadata(self, metadata: Any) -> None:
        """As grpc's: sent now, once, before the answer (raises once it can no longer be)."""
        internals = self.internals
        with self.lock:
            if self.cancelled:
                raise grpc.RpcError()
            if self.metadata_sent or self.statused:
                raise ValueError("Initial metadata no longer allowed!")
            self.call.start_server_batch(
                (internals.metadata_op(metadata, internals.flags),), self._completed
            )
            self.metadata_sent = True
            self.due += 1

    # -- the way out (what the loop handed on, or grpc's polling thread) ---------------------

    def send_status(self, payload: bytes | None) -> None:
        """End the call: ``payload`` (a serialized answer, or none) with the status set on it
        (OK if none) and its trailing metadata, in one batch. Nothing is sent to a client that
        is already gone, nor a second status."""
        internals = self.internals
        code = internals.ok if self.code is None else internals.status_code(self.code)
        operations = [
            internals.status_op(self.trailing_metadata, code, self.details, internals.flags)
        ]
        with self.lock:
            if self.statused or self.cancelled:
                return
            if not self.metadata_sent:
                operations.append(internals.metadata_op(None, internals.flags))
            if payload is not None:
                operations.append(internals.send_op(payload, internals.flags))
            self.call.start_server_batch(operations, self._completed)
            self.statused = True
            self.due += 1

    def fail(self, code: grpc.StatusCode, details: str) -> None:
        self.code = code
        self.set_details(details)
        self.send_status(None)

    def send(self, payload: bytes, on_sent: Callable[[bool], None]) -> bool:
        """Start sending one message of a stream (with the initial metadata, if not sent yet);
        ``on_sent(still_open)`` runs on grpc's polling thread once it has gone. ``False``, and
        nothing started, when the call is already over. One message at a time per call."""
        internals = self.internals
        with self.lock:
            if self.cancelled or self.statused:
                return False
            if self.metadata_sent:
                operations: tuple[Any, ...] = (internals.send_op(payload, internals.flags),)
            else:
                operations = (
                    internals.metadata_op(None, internals.flags),
                    internals.send_op(payload, internals.flags),
                )
                self.metadata_sent = True
            self.on_sent = on_sent
            self.call.start_server_batch(operations, self._sent)
            self.due += 1
        return True

    # -- the way in ----------------------------------------------------------------------

    def arrive(self, method: Method) -> None:
        """On grpc's polling thread, as the call arrives: ask for the close (which says whether
        the client cancelled) and the first request message; a request stream's handler
        starts now, and reads its requests as they come."""
        call = Call(method.loop, self, method.relay)
        sender = method.sender
        if method.relay is None:
            assert sender is not None  # a stream's method has its sender
            call._outbox = Outbox(call, self, method.render, sender)
        self.on_end = call.on_rpc_end
        internals = self.internals
        if method.requests:
            assert sender is not None
            inbox = self.inbox = Inbox(method.loop, self, method.parse, sender)
            with self.lock:
                self.call.start_server_batch((internals.close_op(internals.flags),), self._closed)
                self.due = 1
            self._hand_on(method, call, inbox)
            inbox.receive()
            return
        self.method, self.handler = method, call
        with self.lock:
            self.call.start_server_batch((internals.close_op(internals.flags),), self._closed)
            self.call.start_server_batch((internals.receive_op(internals.flags),), self._received)
            self.due = 2

    def receive_next(self) -> None:
        """Ask for the next message of a request stream, for its inbox: its ``on_message``
        (parsed), ``on_unparsable``, or ``on_end`` (None when the client has closed its side,
        ``asyncio.CancelledError()`` when the call is over) runs when it comes, on grpc's
        polling thread, or at once here (the sender's thread, or the serving loop's)."""
        internals = self.internals
        with self.lock:
            inbox = self.inbox
            if inbox is None:  # the call is over for grpc: its handler is cancelled or done
                return
            if not (self.cancelled or self.statused or self.client_closed):
                self.call.start_server_batch(
                    (internals.receive_op(internals.flags),), self._received
                )
                self.due += 1
                return
            closed = self.client_closed and not self.cancelled
        inbox.on_end(None if closed else asyncio.CancelledError())

    def _hand_on(self, method: Method, call: Call, request: Any) -> None:
        """Start the handler with ``request`` (one message, or the inbox) on the loop."""
        try:
            method.loop.call_soon_threadsafe(call.start_with, method.behavior, request)
        except Exception as exc:  # the loop is gone (closed): the call cannot be served
            logger.exception("could not hand a gRPC request on")
            self.fail(grpc.StatusCode.UNAVAILABLE, f"the server could not take the request: {exc}")

    def _take_one(self, payload: bytes | None) -> None:
        """The one request message of a unary call or a response stream."""
        method, call = self.method, self.handler
        self.method = self.handler = None
        if method is None or call is None:  # pragma: no cover - one receive per such call
            return
        if payload is None:  # the client closed its side without a message
            name = self.rpc_event.call_details.method.decode(errors="replace")
            self.fail(
                grpc.StatusCode.UNIMPLEMENTED,
                f'"{name}" requires exactly one request message.',
            )
            return
        try:
            request = payload if method.parse is None else method.parse(payload)
        except Exception as exc:
            self.fail(grpc.StatusCode.INVALID_ARGUMENT, unparsable(exc))
            return
        self._hand_on(method, call, request)

    def _take_next(self, inbox: Inbox, payload: bytes | None) -> None:
        """A message of a request stream (None: its end), for its inbox."""
        if payload is None:  # the client closed its side, or the call is over
            with self.lock:
                if not self.cancelled:
                    self.client_closed = True
                closed = not self.cancelled
            inbox.on_end(None if closed else asyncio.CancelledError())
            return
        try:
            message = payload if inbox.parse is None else inbox.parse(payload)
        except Exception as exc:
            inbox.on_unparsable(exc)
        else:
            inbox.on_message(message)

    # -- grpc's polling thread: the completions ---------------------------------------------

    def _over(self) -> tuple[Any, tuple[()]]:
        """After a completion (with the lock): whether grpc's server may drop the call now."""
        if self.due or not (self.statused or self.cancelled):
            return _GOING_ON
        self.inbox = None  # (it refers to this call: no cycle left for the collector)
        on_end, self.on_end = self.on_end, None
        if on_end is not None:
            try:
                on_end()  # grpc's termination callback: cancels a handler that still runs
            except Exception:  # the loop is gone (closed): nothing runs there any more
                logger.exception("failed to end a gRPC call")
        return self, ()

    def _completed(self, _event: Any) -> tuple[Any, tuple[()]]:
        with self.lock:
            self.due -= 1
            return self._over()

    def _closed(self, event: Any) -> tuple[Any, tuple[()]]:
        """The client's side is over: ``cancelled`` when it went before the status."""
        with self.lock:
            self.due -= 1
            if event.batch_operations[0].cancelled():
                self.cancelled = True
            return self._over()

    def _received(self, event: Any) -> tuple[Any, tuple[()]]:
        payload = event.batch_operations[0].message()
        try:
            inbox = self.inbox
            if inbox is None:
                self._take_one(payload)
            else:
                self._take_next(inbox, payload)
        except Exception:  # never out of here: it would end grpc's polling thread
            logger.exception("failed to take a gRPC request")
        with self.lock:
            self.due -= 1
            return self._over()

    def _sent(self, _event: Any) -> tuple[Any, tuple[()]]:
        with self.lock:
            self.due -= 1
            still_open = not (self.cancelled or self.statused)
            on_sent, self.on_sent = self.on_sent, None
            outcome = self._over()
        if on_sent is not None:
            try:
                on_sent(still_open)
            except Exception:  # never out of here: it would end grpc's polling thread
                logger.exception("failed to go on with a gRPC stream")
        return outcome


class Serving:
    """The serving loop of one ``grpc.server`` (see the module's docstring)."""

    def __init__(self, server: grpc.Server, internals: Internals, sender: Sender) -> None:
        self.state = server._state
        self.internals = internals
        self.sender = sender  # what the loop hands on runs here between polls, if it can
        #: Relayed methods by name, and names grpc serves itself (none of Podium's); only names
        #: a handler was found for are remembered, never a client's unknown ones.
        self.methods: dict[bytes, Method | None] = {}

    def method(self, rpc_event: Any) -> Method | None:
        """The relayed method a call is for; None when grpc serves it."""
        name = rpc_event.call_details.method
        try:
            return self.methods[name]
        except KeyError:
            pass
        found = self.internals.find_handler(self.state, rpc_event)
        if found is None:
            return None  # unknown: grpc answers it, and nothing is remembered
        relayed = getattr(found.stream_stream, "relayed", None) if found.stream_stream else None
        self.methods[name] = relayed
        return relayed

    def arrived(self, event: Any) -> bool:
        """A call has arrived: served here when it is for a relayed method, by grpc otherwise.
        Whether to go on serving."""
        internals, state = self.internals, self.state
        method = self.method(event) if event.success else None
        if method is None:
            return internals.process(state, event)
        served = ServedCall(internals, event)
        with state.lock:
            state.due.remove(event.tag)
            state.rpc_states.add(served)
            served.arrive(method)
            if state.stage is internals.started:
                internals.request_call(state)
            elif internals.stop_serving(state):
                return False
        return True

    def run(self) -> None:
        sched.batch_this_thread()  # woken by grpc's threads, it needs the GIL (sched.py)
        internals, state, sender = self.internals, self.state, self.sender
        queue, request_tag, timeout = state.completion_queue, internals.request_tag, internals.idle
        handed_on = sender.queued
        try:
            while True:
                # What the loop handed on while this thread was awake is run now, with no
                # thread woken for it. From here on, what it hands on wakes the sender's
                # thread: Sender.put reads ``polling`` after queueing, so this run or that one
                # sees each item.
                sender.polling = True
                if handed_on:
                    sender.run_queued()
                event = queue.poll(time.time() + timeout)
                sender.polling = False
                if state.server_deallocated:
                    internals.begin_shutdown(state)
                if event.completion_type == internals.queue_timeout:  # idle for a second
                    sched.batch_named_threads(sched.GRPC_THREADS)  # any grpc started since
                elif event.tag is request_tag:
                    if not self.arrived(event):
                        return
                elif not internals.process(state, event):
                    return
                # Drop the event before polling again, as grpc does: one that holds a
                # shut-down call would make the next poll spin.
                event = None
        finally:
            sender.polling = True  # no more polls: the sender's thread runs what comes
            sender.run_queued()


def start(server: grpc.Server, internals: Internals, sender: Sender) -> Serving:
    """Start ``server`` (a ``grpc.server``) served by this module's loop, as grpc's ``start``
    would with its own, running ``sender``'s work between its polls: raises ``ValueError`` if
    it is started already."""
    serving = Serving(server, internals, sender)
    state = server._state
    if state.interceptor_pipeline is not None or state.maximum_concurrent_rpcs is not None:
        # grpc would apply them to every call: a relayed call never reaches them
        raise ValueError("the relay serves no server with interceptors or a concurrency limit")
    with state.lock:
        if state.stage is not internals.stopped:
            raise ValueError("Cannot start already-started server!")
        state.server.start()
        state.stage = internals.started
        for name in state.registered_method_handlers:
            internals.request_registered_call(state, name)
        internals.request_call(state)
        thread = threading.Thread(target=serving.run, name="podium-grpc-serve", daemon=True)
        thread.start()
    return serving
