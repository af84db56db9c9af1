"""The bridge: Podium's coroutine handlers served from grpc's own threads, relayed through
grpcio's internals, where a start-up check finds them as expected; ``grpc.aio`` otherwise.

grpcio's ``grpc.server`` moves a call through its C core faster than ``grpc.aio`` does, but the
data plane, the schedulers and async models live on one event loop. The bridge keeps both: every
handler is still written once, as a coroutine against a small context (:class:`LoopContext`, the
part of ``grpc.aio.ServicerContext`` Podium's handlers use), and :meth:`Bridge.handler` turns
its ``grpc.aio``-style method handler into one that grpc's polling thread relays to the loop.

No call goes through a pool thread, nor through grpc's ``_server.py``: the relay polls grpc's
completion queue with a loop of its own (:mod:`._serving`, over grpc's server state, so that
ports, stopping and its grace stay grpc's), which asks for the request message when a call
arrives, parses it when it has, and hands it to the loop with one ``call_soon_threadsafe``; the
loop runs the handler in a task and hands a unary call's outcome on (:class:`._relay.Sender`):
the answer and the status leave together in one batch, exactly as grpc does at the end of a
unary call, sent by the serving loop between two polls, or, while it polls, by one sender thread
woken for it. Sending from
another thread keeps the loop from handing the GIL to grpc's polling thread on every call. Every
other event (unknown methods, the shutdown) goes through grpc's own processing.
Streams are served by the same loop and hold no thread while open. A response stream leaves
through an outbox: one send in flight at a time, the first handed on as a unary answer is, each
next one by grpc's polling thread as the previous completes, and the status after the last. A
request stream arrives through an inbox, whose messages grpc's polling thread receives one after
another. Both are bounded by a window of :data:`WINDOW` messages: the loop waits while that many
have not left, and no more are read ahead of the handler (HTTP/2 flow control takes it back to
the client).

The relay uses grpcio internals. :func:`decide` chooses the mode once per process, when the first
server that would relay starts: the internals' names, signatures and server state are checked,
then a self-test serves real calls through the relay on a private loopback server; if either
fails, the server is a ``grpc.aio`` server instead (:attr:`Mode.AIO`), serving the same
coroutine handlers, and it logs why (:mod:`._mode`).

A handler that raises ends its call with the status the server's ``status`` function gives (the
front end's one mapping, ``server/grpc/_errors.status_of``); cancellation is the same as on
``grpc.aio``: when the RPC ends for the client (cancelled, connection dropped, deadline), grpc
runs the call's callback and the bridge cancels the handler's task, so the model's work is
cancelled exactly as for an HTTP disconnect.

Layout, each module importing only those above it: ``_internals`` (grpcio's private pieces and
their check), ``_relay`` (the window, request streams as async iterators, the sender thread, the
relayed unary ending, outbox and inbox), ``_context`` (one call: :class:`LoopContext` and the
state shared with grpc's threads), ``_serving`` (the serving loop and a relayed call's grpc side),
``_bridge`` (:class:`Bridge`), ``_mode`` (the decision and the self-test).
"""

from __future__ import annotations

from ._bridge import Bridge
from ._context import Aborted
from ._internals import Internals, InternalsDiffer, load
from ._mode import Decision, Mode, check, decide, self_test
from ._relay import WINDOW

__all__ = [
    "WINDOW",
    "Aborted",
    "Bridge",
    "Decision",
    "Internals",
    "InternalsDiffer",
    "Mode",
    "check",
    "decide",
    "load",
    "self_test",
]
