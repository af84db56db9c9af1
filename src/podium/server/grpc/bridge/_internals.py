"""The grpcio internals that let the relay serve a call below grpc's ``_server.py``, checked when
a server is built.

grpcio's synchronous server hands every call to a pool thread, which asks for the request
message and blocks until it arrives, then runs the handler. Podium's handlers are coroutines on
the event loop, so that pool thread would only wait: first for the request, then for the loop.
Each wait is a thread woken on one core, and those wake-ups, not Python, were most of the cost of
a call (bench/RESULTS.md, section 9); grpc's per-call Python around them was most of the rest
(sections 52, 58 and 64).

:class:`Internals` holds what the relay's serving loop (:mod:`._serving`) drives grpc's server
with: grpc's server-level functions (over its server state: requesting calls, processing the
events of the calls it serves itself, stopping) and cygrpc's batch operations, with which the
serving loop receives and sends the messages and the status of a relayed call itself.
:data:`INLINE` is an executor that runs what grpc submits at once, on grpc's polling thread: the
relayed methods are registered with it, so that a server not served by the relay's loop ends
their calls at once rather than in a pool thread.

None of these names is public API. :func:`load` checks each of them (names, parameters, and the
attributes of the server state grpc makes) and raises :class:`InternalsDiffer`, naming the
difference, when this grpcio is not as expected; the server then serves every call with
``grpc.aio`` (:mod:`._mode` decides, once per process, and says so in the log).
"""

from __future__ import annotations

import inspect
from concurrent import futures
from typing import Any

import grpc

__all__ = ["INLINE", "Internals", "InternalsDiffer", "load", "unparsable"]


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


class Internals:
    """grpc's private pieces, looked up once (see the module's docstring)."""

    def __init__(self, server_module: Any, cygrpc: Any) -> None:
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


def load(server_module: Any = None, cygrpc: Any = None) -> Internals:
    """The internals of the installed grpcio (or of the modules given, for tests).

    Checks every name :class:`Internals` uses and every function's parameters, the attributes
    the serving loop reads of a call (cygrpc's request-call event and call), then makes a server
    state the way grpc does and checks the attributes the serving loop uses. Raises
    :class:`InternalsDiffer` naming the first difference. It does not prove that they still behave the same: the bridge's self-test
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
        "_select_thread_pool_for_behavior": ["behavior", "default_thread_pool"],
        "_process_event_and_continue": ["state", "event"],
        "_request_call": ["state"],
        "_request_registered_call": ["state", "method"],
        "_stop_serving": ["state"],
        "_begin_shutdown_once": ["state"],
        "_application_code": ["code"],
    }
    for name, params in expected.items():
        _check_parameters(f"grpc._server.{name}", getattr(_server, name, None), params)
    names = (
        "_EMPTY_FLAGS",
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
    _check_call(cygrpc)
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


def _check_call(cygrpc: Any) -> None:
    """What the serving loop reads of every call: the request-call event, its details and the
    call in it."""
    for owner, attribute in (
        ("RequestCallEvent", "call"),
        ("RequestCallEvent", "call_details"),
        ("RequestCallEvent", "invocation_metadata"),
        ("CallDetails", "method"),
        ("CallDetails", "deadline"),
        ("Call", "start_server_batch"),
        ("Call", "peer"),
    ):
        if not hasattr(getattr(cygrpc, owner, None), attribute):
            raise InternalsDiffer(f"grpc._cython.cygrpc.{owner}.{attribute} is missing")
