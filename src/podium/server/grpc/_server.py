"""The gRPC listener: one server built from a list of services, plus health and reflection, its
coroutine handlers on the event loop the HTTP server uses: a ``grpc.server`` whose calls are
relayed to the loop (:mod:`.bridge`) where grpcio's internals pass the relay's start-up check,
a ``grpc.aio`` server otherwise.

A front end describes what it serves as a :class:`Service`: its full name, a method handler per
RPC (``grpc.unary_unary_rpc_method_handler`` and friends, with the serializers of Podium's
private message classes), and when it is healthy. :class:`GrpcServer` registers each one with
``grpc.method_handlers_generic_handler``, answers ``grpc.health.v1.Health`` for the server (``""``)
and for every service, and serves reflection from a private descriptor pool, so reflection
describes Podium's services exactly as served without anything entering protobuf's default pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import grpc
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection, reflection_pb2

from ... import sched
from .._access import AccessLog, RequestIds
from . import _channelz
from ._access import Authorize, observed
from ._errors import unhandled_status
from ._limits import GrpcLimits, channel_options
from ._pool import reflection_pool
from .bridge import Bridge, Decision, decide

__all__ = ["GrpcServer", "Service"]

logger = logging.getLogger("podium.grpc")

#: How often a health ``Watch`` looks again when nothing told it that readiness changed.
WATCH_INTERVAL = 1.0


def _always() -> bool:
    return True


@dataclass(frozen=True, slots=True)
class Service:
    """One gRPC service as a front end hands it to :class:`GrpcServer`.

    ``methods`` maps each method name to its handler. ``healthy`` says whether health reports it
    ``SERVING``. ``served_outputs`` names, per method, the message type actually sent where it
    differs from the ``.proto`` file (a server option can change it), so that reflection tells
    the truth. ``protocol``: what its calls' access lines name the protocol (``oip_grpc``, ...).
    """

    name: str
    methods: dict[str, grpc.RpcMethodHandler]
    healthy: Callable[[], bool] = _always
    served_outputs: dict[str, str] = field(default_factory=dict)
    protocol: str = "grpc"


class _Health:
    """``grpc.health.v1.Health``, computed when asked: it can never disagree with the registry.

    ``""`` (the whole server) is ``SERVING`` when every service is; each service answers by its
    own ``healthy``; once the server is stopping, everything is ``NOT_SERVING``.
    """

    def __init__(self, services: Sequence[Service]) -> None:
        self._services = {s.name: s for s in services}
        self.stopping = False
        self._changed = asyncio.Event()

    def status(self, name: str) -> Any:
        states = health_pb2.HealthCheckResponse
        if name and name not in self._services:
            return states.SERVICE_UNKNOWN
        if self.stopping:
            return states.NOT_SERVING
        services = [self._services[name]] if name else self._services.values()
        return states.SERVING if all(s.healthy() for s in services) else states.NOT_SERVING

    def service(self) -> Service:
        """``grpc.health.v1.Health`` as a :class:`Service` of coroutine handlers."""
        request = health_pb2.HealthCheckRequest.FromString
        response = health_pb2.HealthCheckResponse.SerializeToString
        return Service(
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            {
                "Check": grpc.unary_unary_rpc_method_handler(
                    self.Check, request_deserializer=request, response_serializer=response
                ),
                "Watch": grpc.unary_stream_rpc_method_handler(
                    self.Watch, request_deserializer=request, response_serializer=response
                ),
            },
            protocol="grpc_health",
        )

    def changed(self) -> None:
        """Wake every ``Watch`` now (readiness may have changed)."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def Check(self, request: Any, context: Any) -> Any:
        status = self.status(request.service)
        if status == health_pb2.HealthCheckResponse.SERVICE_UNKNOWN:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service '{request.service}'")
        return health_pb2.HealthCheckResponse(status=status)

    async def Watch(self, request: Any, context: Any) -> None:
        last = None
        while True:
            status = self.status(request.service)
            if status != last:
                await context.write(health_pb2.HealthCheckResponse(status=status))
                last = status
                continue  # look again: it may have changed while the write waited
            if self.stopping:
                return  # NOT_SERVING was sent; an open Watch must not hold up the shutdown
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), WATCH_INTERVAL)


class GrpcServer:
    """A gRPC server for ``services`` on ``host:port`` (port 0 picks a free one).

    With ``relay`` (the default), a ``grpc.server`` whose calls are relayed between grpc's
    polling thread and the running event loop (:class:`~.bridge.Bridge`), holding no thread,
    where :func:`~.bridge.decide` finds grpcio's internals as expected when the server starts;
    where it does not, or with ``relay=False``, a ``grpc.aio`` server on the loop itself (slower
    per call). The handlers are the same coroutines either way. :attr:`decision` says which (it
    is ``None`` with ``relay=False``), and :meth:`start` logs it.

    ``access``: the access log and the request ids every call gets (:mod:`._access`; None: no
    line and no id, for servers that are not Podium's listeners). ``authorize``: called with
    each call's metadata before its handler runs (the services', not health's nor
    reflection's); when it raises (e.g. ``Unauthenticated``), the call ends with that error's
    status and its handler never runs; it needs ``access``. Messages larger than
    ``max_message_size`` bytes, either way, end the call with ``RESOURCE_EXHAUSTED``.
    ``limits`` (default: ``GrpcLimits()``) bound connections, streams, pings and the life of a
    connection (:mod:`._limits`). Create and start it inside the running event loop.
    """

    def __init__(
        self,
        services: Sequence[Service],
        *,
        host: str,
        port: int,
        max_message_size: int,
        grace: float = 10.0,
        authorize: Callable[[Any], None] | None = None,
        relay: bool = True,
        limits: GrpcLimits | None = None,
        access: tuple[AccessLog, RequestIds] | None = None,
    ) -> None:
        self.services = list(services)
        self._access = access
        self.host = host
        self.port = port
        self.grace = grace
        self.address = ""
        self.relay = relay
        #: How calls are served (set by :meth:`start`); ``None`` when not asked to relay.
        self.decision: Decision | None = None
        if authorize is not None and access is None:
            raise ValueError("authorize is checked where the access line is written: give access")
        self._authorize = authorize
        self.health = _Health(self.services)
        if limits is None:
            limits = GrpcLimits()
        self._options = [
            ("grpc.max_send_message_length", max_message_size),
            ("grpc.max_receive_message_length", max_message_size),
            # A port that another process listens on must fail here, not be shared.
            ("grpc.so_reuseport", 0),
            *channel_options(limits),
        ]
        self.limits = limits
        self._pool: ThreadPoolExecutor | None = None
        self._bridge: Bridge | None = None
        self._server: Any = None
        self._channelz: set[int] | None = None

    @property
    def relayed(self) -> bool:
        """Whether calls are relayed (a ``grpc.server``), not served by ``grpc.aio``."""
        return self._bridge is not None

    def open_connections(self) -> int | None:
        """Connections open now (grpc's channelz; None where it does not say)."""
        if not self._channelz:
            return None
        return _channelz.open_connections(self._channelz)

    async def start(self) -> str:
        """Decide how calls are served, register the services, bind and start serving; the
        address (``host:port``) it listens on.

        Raises ``OSError`` naming the address when it cannot be bound.
        """
        if self.relay:
            self.decision = await decide(unhandled_status)
        internals = None if self.decision is None else self.decision.internals
        adapt: Callable[[grpc.RpcMethodHandler], grpc.RpcMethodHandler] = _unchanged
        before = _channelz.server_ids()  # the server's channelz id is made with it
        if internals is not None:
            # grpc.server wants a pool; every method is relayed, so no call runs in it.
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="podium-grpc")
            self._server = grpc.server(self._pool, options=self._options)
            self._bridge = Bridge(
                asyncio.get_running_loop(), internals=internals, status=unhandled_status
            )
            adapt = self._bridge.handler
        else:
            # No thread per call either: calls in flight are bounded by connections x streams.
            self._server = grpc.aio.server(options=self._options)
        after = _channelz.server_ids()
        self._channelz = None if before is None or after is None else after - before
        wrapped = [(service, self._authorize) for service in self.services]
        wrapped.append((self.health.service(), None))  # health stays open, for probes
        for service, authorize in wrapped:
            methods = {
                name: adapt(self._observed(service, name, handler, authorize))
                for name, handler in service.methods.items()
            }
            self._add(service.name, methods)
        reflecting = self._reflection()  # open, and without access lines, as before
        self._add(
            reflecting.name,
            {name: adapt(handler) for name, handler in reflecting.methods.items()},
        )
        host = f"[{self.host}]" if ":" in self.host else self.host
        try:
            port = self._server.add_insecure_port(f"{host}:{self.port}")
        except RuntimeError:
            reason = _bind_error(self.host, self.port)
            raise OSError(
                errno.EADDRINUSE, f"cannot listen on {host}:{self.port} for gRPC: {reason}"
            ) from None
        if self._bridge is not None:
            self._bridge.start(self._server)
        else:
            await self._server.start()
        # grpc's I/O threads wake the threads that relay calls to the loop (sched.py)
        sched.batch_named_threads(sched.GRPC_THREADS)
        self.address = f"{host}:{port}"
        if self.decision is not None:
            logger.log(
                logging.INFO if self.relayed else logging.WARNING,
                "gRPC on %s: %s",
                self.address,
                self.decision.describe(),
            )
        return self.address

    def _add(self, name: str, methods: dict[str, grpc.RpcMethodHandler]) -> None:
        self._server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(name, methods),)
        )

    def _reflection(self) -> Service:
        """Server reflection, from a private descriptor pool, as a service of coroutine
        handlers (grpc's own for ``grpc.aio``), relayed like every other one."""
        names = [s.name for s in self.services]
        health_name = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
        outputs = {
            f"{s.name}.{method}": message
            for s in self.services
            for method, message in s.served_outputs.items()
        }
        served = [*names, health_name, reflection.SERVICE_NAME]
        pool = reflection_pool(outputs, [health_pb2.DESCRIPTOR, reflection_pb2.DESCRIPTOR])
        servicer = reflection.aio.ReflectionServicer(served, pool=pool)
        info = grpc.stream_stream_rpc_method_handler(
            servicer.ServerReflectionInfo,
            request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
            response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
        )
        return Service(reflection.SERVICE_NAME, {"ServerReflectionInfo": info})

    def _observed(
        self,
        service: Service,
        name: str,
        handler: grpc.RpcMethodHandler,
        authorize: Authorize,
    ) -> grpc.RpcMethodHandler:
        """``handler`` with each call's id, key check and access line (a refused call has its
        line too), if this server has an access log."""
        if self._access is None:
            return handler
        return observed(service.name, name, handler, service.protocol, self._access, authorize)

    def not_serving(self) -> None:
        """Health says ``NOT_SERVING`` for everything from now on (the server is stopping);
        calls are still served until :meth:`stop`."""
        self.health.stopping = True
        self.health.changed()

    async def stop(self, grace: float | None = None) -> None:
        """Refuse new calls and connections, let calls in flight finish for up to ``grace``
        seconds (the server's own when None), then cancel the rest: their clients get
        ``UNAVAILABLE``, their models' work is cancelled as for a client that left. Called
        again with a shorter grace (0: :meth:`abort`), the shorter one holds."""
        self.not_serving()
        grace = self.grace if grace is None else grace
        if self._server is None:
            return
        if not self.relayed:
            await self._server.stop(grace)
            return
        stopped = self._server.stop(grace)  # in-flight calls still need this loop
        await asyncio.to_thread(stopped.wait)
        if self._bridge is not None:
            await asyncio.to_thread(self._bridge.close)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    async def abort(self) -> None:
        """Cancel every call now (a :meth:`stop` under way ends at once)."""
        self.not_serving()
        if self._server is None:
            return
        if self.relayed:
            self._server.stop(0)
        else:
            await self._server.stop(0)


def _unchanged(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    return handler


def _bind_error(host: str, port: int) -> str:
    """Why ``host:port`` cannot be bound, as the OS says it (grpc only says that it failed)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((host, port))
    except OSError as exc:
        return exc.strerror or str(exc)
    return "the address is in use or not available"
