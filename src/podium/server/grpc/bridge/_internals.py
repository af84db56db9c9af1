"""The few grpcio internals that let a call skip grpc's thread pool, checked when a server is built.

grpcio's synchronous server hands every call to a pool thread, which asks for the request
message and blocks until it arrives, then runs the handler. Podium's handlers are coroutines on
the event loop, so that pool thread would only wait: first for the request, then for the loop.
Each wait is a thread woken on one core, and those wake-ups, not Python, were most of the cost of
a call (bench/RESULTS.md, section 9).

:class:`Internals` does what the pool thread would, without one:

- :data:`INLINE` is an executor that runs what grpc submits at once, on grpc's polling thread.
  A handler registered with it, as a non-blocking streaming method, is called there as soon as
  the call arrives, and returns at once.
- :meth:`Internals.receive` asks for the request message with a batch whose completion grpc's
  polling thread delivers; the callback parses the message there and hands it on (to the loop).
- :meth:`Internals.send_status` ends the call from any thread: the answer and the status in one
  batch, exactly what grpc sends at the end of a unary call.

None of these names is public API. :func:`load` checks each of them (names, parameters, and the
attributes of the per-call state grpc makes for a call) and raises :class:`InternalsDiffer`,
naming the difference, when this grpcio is not as expected; the server then serves every call
with ``grpc.aio`` (:mod:`._mode` decides, once per process, and says so in the log).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc

__all__ = ["INLINE", "Internals", "InternalsDiffer", "load", "unparsable"]

logger = logging.getLogger("podium.grpc")


def _finished() -> futures.Future[Any]:
    future: futures.Future[Any] = futures.Future()
    future.set_result(None)
    return future


class _Inline(futures.ThreadPoolExecutor):
    """Runs each submitted function at once, in the submitting thread (grpc's polling thread).

    grpc only accepts a ``ThreadPoolExecutor`` as a method's own pool, hence the base class; no
    thread is ever started. Only non-blocking handlers may be given it.

    What grpc submits (its ``_stream_response_in_pool``, which runs the handler) returns None
    and catches every exception itself, and grpc only adds a callback to the future it gets
    back (run at once, the future being done). So a call that returns gets one future made
    once, not one of its own (a future holds a ``threading.Condition``: three objects and a
    dozen Python calls per call); one that raises gets its own, with the exception.
    """

    def __init__(self) -> None:
        super().__init__(max_workers=1, thread_name_prefix="podium-grpc-inline")
        self._done = _finished()

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> futures.Future[Any]:
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            future: futures.Future[Any] = futures.Future()
            future.set_exception(exc)
            return future
        if result is None:
            return self._done
        future = futures.Future()
        future.set_result(result)
        return future


#: The executor of relayed unary methods (``experimental_thread_pool``).
INLINE = _Inline()

Parse = Callable[[bytes], Any]
Deliver = Callable[[Any], None]


class Internals:
    """grpc's private pieces, looked up once (see the module's docstring)."""

    def __init__(self, server_module: Any, cygrpc: Any) -> None:
        self._status = server_module._status
        self._receive_message = server_module._receive_message
        self._token = server_module._RECEIVE_MESSAGE_TOKEN
        self._flags = server_module._EMPTY_FLAGS
        self._open = server_module._OPEN
        self._closed = server_module._CLOSED
        self._operation = cygrpc.ReceiveMessageOperation
        # for streams
        self._cancelled = server_module._CANCELLED
        self._send_op = cygrpc.SendMessageOperation
        self._initial_metadata_op = server_module._get_initial_metadata_operation
        self._send_flags = server_module._get_send_message_op_flags_from_state
        self._send_message = server_module._send_message
        self._reset_message = server_module._reset_per_message_state
        self._message_token = server_module._SEND_MESSAGE_TOKEN
        self._first_message_token = server_module._SEND_INITIAL_METADATA_AND_SEND_MESSAGE_TOKEN
        # for the serving loop (._serving): grpc's server state, driven one level lower
        self.process = server_module._process_event_and_continue
        self.request_call = server_module._request_call
        self.request_registered_call = server_module._request_registered_call
        self.stop_serving = server_module._stop_serving
        self.begin_shutdown = server_module._begin_shutdown_once
        self.request_tag = server_module._REQUEST_CALL_TAG
        self.started = server_module._ServerStage.STARTED
        self.stopped = server_module._ServerStage.STOPPED
        self.idle = server_module._DEALLOCATED_SERVER_CHECK_PERIOD_S
        self.status_code = server_module._application_code
        self.queue_timeout = cygrpc.CompletionType.queue_timeout
        self.ok = cygrpc.StatusCode.ok
        self.flags = server_module._EMPTY_FLAGS
        self.status_op = cygrpc.SendStatusFromServerOperation
        self.metadata_op = cygrpc.SendInitialMetadataOperation
        self.send_op = cygrpc.SendMessageOperation
        self.close_op = cygrpc.ReceiveCloseOnServerOperation
        self.receive_op = cygrpc.ReceiveMessageOperation

    def find_handler(self, state: Any, rpc_event: Any) -> grpc.RpcMethodHandler | None:
        """The method handler grpc's generic handlers give for a call (as grpc's
        ``_GenericMethod`` looks it up), or None."""
        details = _CallDetails(
            rpc_event.call_details.method.decode("utf-8", "replace"),
            rpc_event.invocation_metadata,
        )
        for generic in state.generic_handlers:
            handler = generic.service(details)
            if handler is not None:
                return handler
        return None

    def send_status(self, context: grpc.ServicerContext, payload: bytes | None) -> None:
        """End the call: ``payload`` (a serialized answer, or none) and the status set on
        ``context`` (``set_code`` / ``set_details``; OK if none), with its trailing metadata.
        Nothing is sent to a client that is already gone, nor a second status. Thread-safe."""
        state = context._state
        with state.condition:
            if not state.statused:
                self._status(context._rpc_event, state, payload)

    def send(
        self, context: grpc.ServicerContext, payload: bytes, on_sent: Callable[[bool], None]
    ) -> bool:
        """Start sending one message of a stream (with the initial metadata, if not sent yet);
        ``on_sent(still_open)`` runs on grpc's polling thread once it has gone. ``False``, and
        nothing started, when the call is already over. One message at a time per call."""
        rpc_event = context._rpc_event
        state = context._state
        with state.condition:
            if state.client is self._cancelled or state.statused:
                return False
            flags = self._send_flags(state)
            if state.initial_metadata_allowed:
                operations: tuple[Any, ...] = (
                    self._initial_metadata_op(state, None),
                    self._send_op(payload, flags),
                )
                token = self._first_message_token
                state.initial_metadata_allowed = False
            else:
                operations = (self._send_op(payload, flags),)
                token = self._message_token
            sent = self._send_message(state, token)

            def on_event(event: Any) -> Any:
                outcome = sent(event)
                try:
                    on_sent(state.client is not self._cancelled and not state.statused)
                except Exception:  # never out of here: it would end grpc's polling thread
                    logger.exception("failed to go on with a gRPC stream")
                return outcome

            rpc_event.call.start_server_batch(operations, on_event)
            state.due.add(token)
            self._reset_message(state)
        return True

    def receive_next(
        self,
        context: grpc.ServicerContext,
        parse: Parse | None,
        on_message: Deliver,
        on_end: Callable[[BaseException | None], None],
        on_unparsable: Callable[[Exception], None],
    ) -> None:
        """Ask for the next message of a request stream: ``on_message(parsed)`` when it comes,
        ``on_unparsable(error)`` when it does not parse (the stream goes on), ``on_end(None)``
        when the client has closed its side, ``on_end(asyncio.CancelledError())`` when the call
        is over. They run on grpc's polling thread, or at once here."""
        rpc_event = context._rpc_event
        state = context._state
        received = self._receive_message(state, rpc_event.call, None)

        def on_event(event: Any) -> Any:
            outcome = received(event)
            with state.condition:
                payload, state.request = state.request, None
                client = state.client
            try:
                if payload is not None:
                    try:
                        message = payload if parse is None else parse(payload)
                    except Exception as exc:
                        on_unparsable(exc)
                    else:
                        on_message(message)
                elif client is self._closed:
                    on_end(None)
                else:
                    on_end(asyncio.CancelledError())
            except Exception:  # never out of here: it would end grpc's polling thread
                logger.exception("failed to go on with a gRPC request stream")
            return outcome

        with state.condition:
            if state.client is self._open and not state.statused:
                rpc_event.call.start_server_batch((self._operation(self._flags),), on_event)
                state.due.add(self._token)
                return
            closed = state.client is self._closed
        on_end(None if closed else asyncio.CancelledError())

    def receive(self, context: grpc.ServicerContext, parse: Parse | None, deliver: Deliver) -> None:
        """Ask for the call's one request message; when it has arrived, call ``deliver`` with it
        parsed by ``parse`` (on grpc's polling thread). A message that does not parse ends the
        call with ``INVALID_ARGUMENT``, a client that sent none with ``UNIMPLEMENTED`` (what grpc
        says for a unary call without its request); a cancelled call delivers nothing."""

        def on_message(request: Any) -> None:
            try:
                deliver(request)
            except Exception as exc:  # the loop is gone (closed): the call cannot be served
                logger.exception("could not hand a gRPC request on")
                self._fail(
                    context,
                    grpc.StatusCode.UNAVAILABLE,
                    f"the server could not take the request: {exc}",
                )

        def on_end(error: BaseException | None) -> None:
            if error is None:  # the client closed its side without a message
                method = context._rpc_event.call_details.method.decode(errors="replace")
                self._fail(
                    context,
                    grpc.StatusCode.UNIMPLEMENTED,
                    f'"{method}" requires exactly one request message.',
                )

        def on_unparsable(exc: Exception) -> None:
            self._fail(context, grpc.StatusCode.INVALID_ARGUMENT, unparsable(exc))

        self.receive_next(context, parse, on_message, on_end, on_unparsable)

    def _fail(self, context: grpc.ServicerContext, code: grpc.StatusCode, details: str) -> None:
        context.set_code(code)
        context.set_details(details)
        self.send_status(context, None)


class _CallDetails(grpc.HandlerCallDetails):
    """What a generic handler is asked about a call: its method and metadata."""

    __slots__ = ("method", "invocation_metadata")

    def __init__(self, method: str, invocation_metadata: Any) -> None:
        self.method = method
        self.invocation_metadata = invocation_metadata


def unparsable(exc: Exception) -> str:
    """What a client is told of a request message that does not parse."""
    return f"the request message does not parse: {exc}"


class InternalsDiffer(Exception):
    """This grpcio's internals are not what the relay was written against; the message says
    which one differs."""


#: Attributes of grpc's per-call state (``_RPCState``) that :class:`Internals` reads or sets.
_STATE_ATTRIBUTES = (
    "condition",
    "statused",
    "client",
    "request",
    "due",
    "initial_metadata_allowed",
)


def load(server_module: Any = None, cygrpc: Any = None) -> Internals:
    """The internals of the installed grpcio (or of the modules given, for tests).

    Checks every name :class:`Internals` uses and every function's parameters, then makes a
    per-call state and a servicer context the way grpc does for a call, and checks the
    attributes read from them on every call. Raises :class:`InternalsDiffer` naming the first
    difference. It does not prove that they still behave the same: the bridge's self-test
    (:func:`~._mode.check`) does, with real calls.
    """
    if server_module is None or cygrpc is None:
        try:
            import grpc._cython.cygrpc as installed_cygrpc
            import grpc._server as installed_server
        except ImportError as exc:  # pragma: no cover - every grpcio this project allows has both
            raise InternalsDiffer(
                f"grpc._server or grpc._cython.cygrpc is missing: {exc}"
            ) from None
        server_module, cygrpc = installed_server, installed_cygrpc
    _server = server_module
    expected: dict[str, list[str]] = {
        "_status": ["rpc_event", "state", "serialized_response"],
        "_receive_message": ["state", "call", "request_deserializer"],
        "_select_thread_pool_for_behavior": ["behavior", "default_thread_pool"],
        "_get_initial_metadata_operation": ["state", "metadata"],
        "_get_send_message_op_flags_from_state": ["state"],
        "_send_message": ["state", "token"],
        "_reset_per_message_state": ["state"],
        # the serving loop's
        "_process_event_and_continue": ["state", "event"],
        "_request_call": ["state"],
        "_request_registered_call": ["state", "method"],
        "_stop_serving": ["state"],
        "_begin_shutdown_once": ["state"],
        "_application_code": ["code"],
    }
    for name, params in expected.items():
        _check_parameters(f"grpc._server.{name}", getattr(_server, name, None), params)
    context_class = getattr(_server, "_Context", None)
    _check_parameters(
        "grpc._server._Context",
        getattr(context_class, "__init__", None),
        ["self", "rpc_event", "state", "request_deserializer"],
    )
    names = (
        "_RECEIVE_MESSAGE_TOKEN",
        "_SEND_MESSAGE_TOKEN",
        "_SEND_INITIAL_METADATA_AND_SEND_MESSAGE_TOKEN",
        "_EMPTY_FLAGS",
        "_OPEN",
        "_CLOSED",
        "_CANCELLED",
        "_RPCState",
        "_REQUEST_CALL_TAG",
        "_ServerStage",
        "_DEALLOCATED_SERVER_CHECK_PERIOD_S",
    )
    for name in names:
        if not hasattr(_server, name):
            raise InternalsDiffer(f"grpc._server.{name} is missing")
    for name in (
        "ReceiveMessageOperation",
        "SendMessageOperation",
        "SendStatusFromServerOperation",
        "SendInitialMetadataOperation",
        "ReceiveCloseOnServerOperation",
        "CompletionType",
        "StatusCode",
    ):
        if not hasattr(cygrpc, name):
            raise InternalsDiffer(f"grpc._cython.cygrpc.{name} is missing")
    _check_call_state(_server, cygrpc)
    _check_server_state(_server)
    return Internals(_server, cygrpc)


#: Attributes of grpc's server state (``_ServerState``) that the serving loop reads or sets.
_SERVER_STATE_ATTRIBUTES = (
    "lock",
    "completion_queue",
    "server",
    "stage",
    "rpc_states",
    "due",
    "generic_handlers",
    "registered_method_handlers",
    "interceptor_pipeline",
    "maximum_concurrent_rpcs",
    "server_deallocated",
)


def _check_server_state(_server: Any) -> None:
    """What the serving loop (:mod:`._serving`) reads of a server: its state, as grpc's
    ``_Server`` makes it, and the stages it moves between."""
    _check_parameters(
        "grpc._server._ServerState",
        getattr(getattr(_server, "_ServerState", None), "__init__", None),
        [
            "self",
            "completion_queue",
            "server",
            "generic_handlers",
            "interceptor_pipeline",
            "thread_pool",
            "maximum_concurrent_rpcs",
        ],
    )
    try:
        state = _server._ServerState(None, None, (), None, None, None)
    except Exception as exc:
        raise InternalsDiffer(f"grpc._server's server state cannot be made: {exc!r}") from None
    missing = [name for name in _SERVER_STATE_ATTRIBUTES if not hasattr(state, name)]
    if missing:
        raise InternalsDiffer(f"grpc._server._ServerState has no {', '.join(missing)}")
    for stage in ("STARTED", "STOPPED"):
        if not hasattr(_server._ServerStage, stage):
            raise InternalsDiffer(f"grpc._server._ServerStage.{stage} is missing")
    if not hasattr(getattr(_server, "_Server", None), "start"):
        raise InternalsDiffer("grpc._server._Server is missing")


def _check_parameters(name: str, function: Any, params: list[str]) -> None:
    if not callable(function):
        raise InternalsDiffer(f"{name} is missing")
    try:
        found = list(inspect.signature(function).parameters)
    except (TypeError, ValueError):  # pragma: no cover - a builtin without a signature
        raise InternalsDiffer(f"{name} has no signature to check") from None
    if found != params:
        raise InternalsDiffer(f"{name} takes ({', '.join(found)}), not ({', '.join(params)})")


def _check_call_state(_server: Any, cygrpc: Any) -> None:
    """What :class:`Internals` reads on every call: the per-call state grpc makes for a call and
    the servicer context over it, the request-call event and the call in it."""
    try:
        state = _server._RPCState()
        rpc_event = object()
        context = _server._Context(rpc_event, state, None)
    except Exception as exc:
        raise InternalsDiffer(f"grpc._server's per-call state cannot be made: {exc!r}") from None
    missing = [name for name in _STATE_ATTRIBUTES if not hasattr(state, name)]
    if missing:
        raise InternalsDiffer(f"grpc._server._RPCState has no {', '.join(missing)}")
    if getattr(context, "_state", None) is not state:
        raise InternalsDiffer("grpc._server._Context keeps its call state elsewhere than _state")
    if getattr(context, "_rpc_event", None) is not rpc_event:
        raise InternalsDiffer("grpc._server._Context keeps its call elsewhere than _rpc_event")
    for owner, attribute in (
        ("RequestCallEvent", "call"),
        ("RequestCallEvent", "call_details"),
        ("CallDetails", "method"),
        ("Call", "start_server_batch"),
    ):
        if not hasattr(getattr(cygrpc, owner, None), attribute):
            raise InternalsDiffer(f"grpc._cython.cygrpc.{owner}.{attribute} is missing")
