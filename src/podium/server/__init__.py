"""Front ends: wire formats in, neutral types to the data plane, wire formats out.

Layout: ``http/`` (OIP REST, Truss and TorchServe inference routes: one ASGI app), ``grpc/``
(every gRPC service on one listener), ``management/`` (TorchServe's management API, REST; its
gRPC service is ``grpc/_management``); beside them what they share: ``_asgi`` (the ASGI contract,
``Scope``, ``Receive``, ``Send``, ``ASGIApp``, that the HTTP apps and their middleware are
written against), ``_auth`` (token authorization), ``_guard`` (the management API refuses web
pages; the start-up exposure rule), ``_limits`` (every HTTP listener's connection limits),
``_headers`` and ``_sequences`` (headers and sequence ids on the wire), ``_requests`` (request
objects for worker processes and for Ray Serve replicas: podium.ray), ``_access`` (request ids
and access lines; the HTTP middleware is ``http/_access``, the gRPC wrapper ``grpc/_access``),
``_otel`` (OpenTelemetry, opt-in: the SDK and the spans' hooks), ``_shutdown`` and
``_exits`` (how the server stops, and how ``podium serve``'s process ends); and ``_runner``
(:class:`Podium`: builds and wires everything, owns the listeners). They reach the layers below through the data plane only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._asgi import ASGIApp, Message, Receive, Scope, Send
from ._exits import exit_now, leftovers_end, run_loop, stuck_threads
from ._guard import UnsafeExposure
from ._otel import TracingUnavailable
from ._requests import RequestSnapshots, Snapshot, model_plane, rebuild

if TYPE_CHECKING:
    from ._runner import Podium

__all__ = [
    "ASGIApp",
    "Message",
    "Podium",
    "Receive",
    "RequestSnapshots",
    "Scope",
    "Send",
    "Snapshot",
    "TracingUnavailable",
    "UnsafeExposure",
    "exit_now",
    "leftovers_end",
    "model_plane",
    "rebuild",
    "run_loop",
    "stuck_threads",
]


def __getattr__(name: str) -> Any:
    # Podium (the whole server: grpc, uvicorn, every front end) loads on first use: a worker
    # process imports podium.server._requests to rebuild request objects, and only that.
    if name == "Podium":
        from ._runner import Podium

        return Podium
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
