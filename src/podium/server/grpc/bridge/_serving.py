"""The relay's serving loop: grpc's completion queue polled by the relay itself, its unary calls
answered below grpc's ``_server.py``.

grpc's ``_serve`` loop makes, for every call, a per-call state with a ``threading.Condition``, a
servicer context, a handler lookup through the generic handlers with its details object, a
submission to the method's executor, and passes four events through its
``_process_event_and_continue`` (bench/RESULTS.md, sections 52 and 58). :func:`start` starts a
``grpc.server`` with this loop in place of grpc's: the same server state (its lock, its stage,
the calls in flight, the tags due), so that ports, channelz, ``stop`` and its grace,
``cancel_all_calls`` and the end of serving are grpc's own, unchanged.

A relayed unary method (:class:`UnaryMethod`, found once per method name through the generic
handlers, as grpc would, and remembered) is served here: the call's arrival starts its two
receives (the request message, and the close that says whether the client cancelled), a
:class:`UnaryCall` holds what grpc's per-call state held (the status, the trailing metadata,
the events due, behind one plain lock), and the sender thread ends it with one batch (the answer
and the status) as before. Every other event (streams, unknown methods, the shutdown, the
completions of grpc's own calls) goes through grpc's ``_process_event_and_continue`` as in
grpc's loop. A call is over, for grpc's server state, once no event is due and its status has
been sent or its client is gone: exactly when grpc would drop its own per-call state.
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

if TYPE_CHECKING:
    from ._internals import Internals
    from ._relay import Relay

__all__ = ["Serving", "UnaryCall", "UnaryMethod", "start"]

logger = logging.getLogger("podium.grpc")

#: What one of this loop's tags returns while its call is not over (grpc's tags return
#: ``(per-call state or None, callbacks)``; the loop drops the state once it is returned).
_GOING_ON: tuple[None, tuple[()]] = (None, ())


class UnaryMethod:
    """A relayed unary method, as the serving loop serves it: the coroutine ``behavior`` run on
    ``loop`` with the request parsed by ``parse``, ended through ``relay``."""

    __slots__ = ("loop", "behavior", "parse", "relay")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        behavior: Callable[..., Any],
        parse: Callable[[bytes], Any] | None,
        relay: Relay,
    ) -> None:
        self.loop = loop
        self.behavior = behavior
        self.parse = parse
        self.relay = relay


class UnaryCall:
    """grpc's side of one relayed unary call served by this loop: what grpc's servicer context
    offers the relay (:class:`~._context.LoopContext` forwards to it), the status it ends with,
    and the events still due. ``lock`` orders the sender thread's status against grpc's polling
    thread seeing the client go."""

    __slots__ = (
        "internals",
        "rpc_event",
        "call",
        "on_end",
        "lock",
        "due",
        "statused",
        "cancelled",
        "metadata_sent",
        "code",
        "details",
        "trailing_metadata",
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
        self.metadata_sent = False
        self.code: grpc.StatusCode | None = None
        self.details = b""
        self.trailing_metadata: Any = None

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

    # -- the end (the sender thread, or grpc's polling thread for a request that fails) -----

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

    # -- grpc's polling thread: the completions ---------------------------------------------

    def _over(self) -> tuple[Any, tuple[()]]:
        """After a completion (with the lock): whether grpc's server may drop the call now."""
        if self.due or not (self.statused or self.cancelled):
            return _GOING_ON
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

    def _received(self, method: UnaryMethod, call: Call) -> Callable[[Any], Any]:
        def received(event: Any) -> tuple[Any, tuple[()]]:
            payload = event.batch_operations[0].message()
            try:
                if payload is None:  # the client closed its side without a message
                    name = self.rpc_event.call_details.method.decode(errors="replace")
                    self.fail(
                        grpc.StatusCode.UNIMPLEMENTED,
                        f'"{name}" requires exactly one request message.',
                    )
                else:
                    self._deliver(method, call, payload)
            except Exception:  # never out of here: it would end grpc's polling thread
                logger.exception("failed to take a gRPC request")
            with self.lock:
                self.due -= 1
                return self._over()

        return received

    def _deliver(self, method: UnaryMethod, call: Call, payload: bytes) -> None:
        try:
            request = payload if method.parse is None else method.parse(payload)
        except Exception as exc:
            self.fail(grpc.StatusCode.INVALID_ARGUMENT, unparsable(exc))
            return
        try:
            method.loop.call_soon_threadsafe(call.start_with, method.behavior, request)
        except Exception as exc:  # the loop is gone (closed): the call cannot be served
            logger.exception("could not hand a gRPC request on")
            self.fail(grpc.StatusCode.UNAVAILABLE, f"the server could not take the request: {exc}")

    def arrive(self, method: UnaryMethod) -> None:
        """On grpc's polling thread, as the call arrives: ask for the close and the request."""
        call = Call(method.loop, self, method.relay)
        self.on_end = call.on_rpc_end
        internals = self.internals
        with self.lock:
            self.call.start_server_batch((internals.close_op(internals.flags),), self._closed)
            self.call.start_server_batch(
                (internals.receive_op(internals.flags),), self._received(method, call)
            )
            self.due = 2


class Serving:
    """The serving loop of one ``grpc.server`` (see the module's docstring)."""

    def __init__(self, server: grpc.Server, internals: Internals) -> None:
        self.state = server._state
        self.internals = internals
        #: Relayed unary methods by name, and names grpc serves itself (streams); only names a
        #: handler was found for are remembered, never a client's unknown ones.
        self.methods: dict[bytes, UnaryMethod | None] = {}

    def method(self, rpc_event: Any) -> UnaryMethod | None:
        """The relayed unary method a call is for; None when grpc serves it."""
        name = rpc_event.call_details.method
        try:
            return self.methods[name]
        except KeyError:
            pass
        found = self.internals.find_handler(self.state, rpc_event)
        if found is None:
            return None  # unknown: grpc answers it, and nothing is remembered
        unary = getattr(found.stream_stream, "unary", None) if found.stream_stream else None
        self.methods[name] = unary
        return unary

    def arrived(self, event: Any) -> bool:
        """A call has arrived: served here when it is for a relayed unary method, by grpc
        otherwise. Whether to go on serving."""
        internals, state = self.internals, self.state
        method = self.method(event) if event.success else None
        if method is None:
            return internals.process(state, event)
        unary = UnaryCall(internals, event)
        with state.lock:
            state.due.remove(event.tag)
            state.rpc_states.add(unary)
            unary.arrive(method)
            if state.stage is internals.started:
                internals.request_call(state)
            elif internals.stop_serving(state):
                return False
        return True

    def run(self) -> None:
        sched.batch_this_thread()  # woken by grpc's threads, it needs the GIL (sched.py)
        internals, state = self.internals, self.state
        queue, request_tag, timeout = state.completion_queue, internals.request_tag, internals.idle
        while True:
            event = queue.poll(time.time() + timeout)
            if state.server_deallocated:
                internals.begin_shutdown(state)
            if event.completion_type == internals.queue_timeout:  # idle for a second
                sched.batch_named_threads(sched.GRPC_THREADS)  # any grpc started since
            elif event.tag is request_tag:
                if not self.arrived(event):
                    return
            elif not internals.process(state, event):
                return
            # Drop the event before polling again, as grpc does: one that holds a shut-down
            # call would make the next poll spin.
            event = None


def start(server: grpc.Server, internals: Internals) -> Serving:
    """Start ``server`` (a ``grpc.server``) served by this module's loop, as grpc's ``start``
    would with its own: raises ``ValueError`` if it is started already."""
    serving = Serving(server, internals)
    state = server._state
    if state.interceptor_pipeline is not None or state.maximum_concurrent_rpcs is not None:
        # grpc would apply them to every call: a relayed unary call never reaches them
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
