"""Start-up and shutdown: the one place where Podium's parts are built and wired together."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from .. import heap, sched
from ..config import ServerConfig
from ..dataplane import ControlPolicy, ModelControl, SystemSharedMemory
from ..errors import DefinitionError
from ..model import truss
from ..model.torchserve import read_metrics_yaml
from ..types import ModelState
from ._access import AccessLog, RequestIds
from ._auth import AuthMiddleware, Authorizer, inference_rule, management_rule, render_error
from ._exits import exit_now
from ._guard import BrowserGuard, check_exposure
from ._limits import (
    ConnectionGuard,
    ConnectionLimits,
    ConnectionStatistics,
    default_max_connections,
    raise_open_files_limit,
)
from ._listener import Uvicorn, bind, url_of
from ._metrics import MetricsApp, PodiumCollector, metrics_registry
from ._metrics_ts import TorchServeCollector, TorchServeLog
from ._otel import start as start_tracing
from ._requests import model_plane
from ._shutdown import Shutdown, delay_for
from .grpc import GrpcLimits, GrpcServer, inference_services
from .grpc._management import ManagementService
from .http import INFERENCE_ROUTES, AccessMiddleware, HttpApp, RootPath, with_web
from .management import (
    MANAGEMENT_ROUTES,
    Management,
    ManagementApp,
    UrlPolicy,
    render_unauthenticated,
)

__all__ = ["Podium", "bind"]

logger = logging.getLogger("podium")


class Podium:
    """A running Podium: data plane (over a registry) and listeners, built from a
    ``ServerConfig``."""

    def __init__(
        self,
        config: ServerConfig,
        paths: list[Path],
        *,
        tracer_provider: Any = None,
        model_settings: Any = None,
    ) -> None:
        """``tracer_provider``: an OpenTelemetry SDK ``TracerProvider`` to make spans with,
        which turns tracing on (tests pass one with the SDK's in-memory exporter); without it
        ``--otel`` and the ``OTEL_*`` variables decide (``_otel.py``)."""
        self.config = config
        self.paths = paths
        # before any thread of the models or the listeners starts (sched.py)
        sched.configure(config.serving.sched_batch)
        #: TorchServe's metrics.yaml (``--metrics-config``; its own by default): read here, so
        #: that a wrong file stops the start (the CLI tells every start-up model where it is)
        self.ts_metrics = read_metrics_yaml(config.logs.metrics_config)
        #: model settings from outside the models' own files (``runtime.ModelSettings``, made
        #: from TorchServe's config.properties and MLServer's settings.json), or None
        self.model_settings = model_settings
        self._tracer_provider = tracer_provider
        self.tracing: Any = None  # _otel.Tracing while tracing is on
        #: ``--ts-metrics log``: TorchServe's frontend metric lines, and the task writing them
        self._ts_log: TorchServeLog | None = None
        self._ts_log_task: asyncio.Task[None] | None = None
        self.dataplane, self.executor = model_plane(
            config.serving.threads,
            config.serving.secrets_dir,
            shared_memory=SystemSharedMemory(config.shared_memory),
            server_name=config.protocols.server_name,
        )
        #: every request's access line (``--access-log``) and the ids of requests
        self.access_log = AccessLog(config.logs.access_log)
        self.request_ids = RequestIds()
        self.addresses: dict[str, str] = {}
        self._guards: dict[str, ConnectionGuard] = {}
        self._limits: ConnectionLimits | None = None
        self._grpc_limits: GrpcLimits | None = None
        self._servers: list[Uvicorn | GrpcServer] = []
        self._grpc: dict[str, GrpcServer] = {}  # by listener name (their connections, for metrics)
        self.authorizer: Authorizer | None = None
        self.management: Management | None = None
        self._signal: int | None = None  # the first stop signal
        self._signalled = asyncio.Event()
        self._shutdown: Shutdown | None = None

    async def start(self, on_ready: Callable[[dict[str, str]], None] | None = None) -> None:
        """Import every model (raising ``DefinitionError``), bind, serve, then load the models."""
        loop = asyncio.get_running_loop()
        config = self.config
        # Before any model is built: its instances make spans from the start. The SDK is
        # imported only if tracing is on.
        self.tracing = start_tracing(config.logs.otel, provider=self._tracer_provider)
        if self.tracing is not None:
            logger.info("tracing on: OpenTelemetry spans for every request")
        self.authorizer = self._keys()
        listeners = config.listeners
        check_exposure(
            listeners.management_host,
            keys=self.authorizer is not None,
            allow_open=config.management.allow_open,
            ports=f"ports {listeners.management_port} and {listeners.grpc_management_port}",
        )
        self._limits, self._grpc_limits = self._connection_limits()
        repository = self.dataplane.repository
        repository.control = ControlPolicy(ModelControl(config.management.model_control))
        repository.registration_fields = config.logs.torchserve_fields()
        # for this process's extractions, start-up models' included
        registration = config.registration
        repository.set_archive_limits(registration.max_archive_size, registration.max_archive_ratio)
        self._warn_model_control()
        self._warn_shared_memory()
        # Importing user code runs it: never on the event loop.
        add = functools.partial(
            repository.add_paths,
            self.paths,
            install_requirements=config.serving.install_model_requirements,
            settings=self.model_settings,
        )
        await loop.run_in_executor(self.executor, add)
        inference_keys = self.authorizer if config.auth.enabled else None  # --auth: every one
        wire = config.protocols
        app: Any = HttpApp(
            self.dataplane,
            max_request_size=wire.max_request_size,
            sequence_header=wire.sequence_header,
        )
        if inference_keys is not None:
            app = AuthMiddleware(app, inference_keys, inference_rule, render_error)
        app = self._observed(with_web(app, config.web), INFERENCE_ROUTES)  # refused ones: lines too
        if config.web.root_path:  # before the access log's route names
            app = RootPath(app, config.web.root_path)
        await self._serve_http(
            "http-inference", app, listeners.host, listeners.http_port, websockets=True
        )
        grpc_server = GrpcServer(
            inference_services(self.dataplane, wire),
            host=listeners.host,
            port=listeners.grpc_port,
            max_message_size=wire.grpc_max_message_size,
            grace=config.shutdown.graceful_timeout,
            relay=not wire.grpc_aio,
            authorize=None
            if inference_keys is None
            else functools.partial(inference_keys.check_metadata, kind="inference"),
            limits=self._grpc_limits,
            access=(self.access_log, self.request_ids),
        )
        self.addresses["grpc-inference"] = await grpc_server.start()
        self._servers.append(grpc_server)
        self._grpc["grpc-inference"] = grpc_server
        await self._start_management()
        if listeners.metrics:
            await self._start_metrics()
        if config.logs.ts_metrics == "log":  # TorchServe's metric lines, written in turn
            self._ts_log = TorchServeLog(TorchServeCollector(self.dataplane, self.ts_metrics))
            self._ts_log_task = loop.create_task(self._ts_log.run())
        await repository.load_all()
        grpc_server.health.changed()
        # Everything built so far lives as long as the server: out of every future collection
        # (the p99); and no collection for the objects of requests in flight (podium/heap.py).
        heap.settle()
        listening = " ".join(f"{k} {v}" for k, v in self.addresses.items())
        versions = repository.versions()
        served = ", ".join(mv.label for mv in versions if mv.state is ModelState.READY)
        failed = [mv for mv in versions if mv.state is not ModelState.READY]
        # The truth, in order: what failed (each one's load error was logged as it happened),
        # then the listeners and what they serve, never naming a version that does not serve.
        for mv in failed:
            logger.warning("%s is not served: %s", mv.label, mv.reason or mv.state.value)
        if failed and len(versions) == 1 and self._one_truss() and not config.serving.keep_running:
            mv = failed[0]
            reason = f"{mv.label}: {mv.reason or mv.state.value}"
            raise DefinitionError(
                f"{reason} (a truss served alone exits when it cannot load, as Truss does; "
                "--keep-running keeps the server up)",
                [f"{reason} (--keep-running keeps the server up)"],
            )
        ready = f"Podium is ready; listening on {listening}; serving {served or 'no models'}"
        if failed:
            not_serving = ", ".join(mv.label for mv in failed)
            logger.warning(
                "%s; not serving %s (readiness answers 503 until they load)", ready, not_serving
            )
        else:
            logger.info("%s", ready)
        if on_ready is not None:
            on_ready(self.addresses)

    def _one_truss(self) -> bool:
        """Whether the models served are one truss (given as its folder)."""
        return len(self.paths) == 1 and truss.is_source(Path(self.paths[0]))

    def _warn_model_control(self) -> None:
        """A warning when any client of the inference listeners may load and unload models."""
        if self.config.management.model_control != ModelControl.INFERENCE.value:
            return
        self._warn_open(
            "model control is open on the inference listeners (--model-control inference): "
            "clients with the inference key can load and unload models",
            "model control is open on the inference listeners (--model-control inference) "
            "without --auth: every client that can reach the inference listeners (%s, HTTP "
            "port %s, gRPC port %s) can unload every model; add --auth, or leave model control "
            "to the management API",
        )

    def _warn_shared_memory(self) -> None:
        """A warning when any client of the inference listeners may map shared memory."""
        config = self.config
        if config.shared_memory.mode != "system":
            return
        prefix = config.shared_memory.key_prefix
        which = (
            f"objects named '{prefix}*'"
            if prefix
            else "any POSIX shared memory object this server's user can open"
        )
        self._warn_open(
            "system shared memory is on: clients with the inference key can map %s",
            "system shared memory is on (--shared-memory system) without --auth: every client "
            "that can reach the inference listeners (%s, HTTP port %s, gRPC port %s) can make "
            "the server map %s and read or write it through a model; add --auth, or "
            "--shm-key-prefix, or listen on loopback only",
            which,
        )

    def _warn_open(self, keyed: str, unkeyed: str, *args: Any) -> None:
        """What clients of the inference listeners may do: ``keyed`` (a line of information)
        with ``--auth``, else ``unkeyed``, a warning naming the listeners (host and ports)
        before ``args``."""
        config = self.config
        if config.auth.enabled:
            logger.info(keyed, *args)
            return
        listeners = config.listeners
        logger.warning(unkeyed, listeners.host, listeners.http_port, listeners.grpc_port, *args)

    def _keys(self) -> Authorizer | None:
        """The keys, written to the key file: for every listener with ``--auth``, for the
        management API by default (unless the default key file cannot be written: then a
        warning, and no keys), none with ``--no-auth``."""
        auth = self.config.auth
        if auth.enabled is False:
            return None
        try:
            made = Authorizer.create(auth.key_file, expiration=auth.token_expiration)
        except OSError as exc:
            if auth.enabled or auth.key_file is not None:
                raise
            logger.warning(
                "the management API is open to every local user: its key file cannot be written "
                "(%s: %s); give a writable --key-file, or --no-auth to silence this",
                exc.filename or "key_file.json",
                exc.strerror or exc,
            )
            return None
        # Said here, to the operator: a 401 names the key file but not where it is.
        logger.info(
            "token authorization on %s; the keys are in %s",
            "every listener" if auth.enabled else "the management API",
            made.key_file,
        )
        return made

    def _connection_limits(self) -> tuple[ConnectionLimits, GrpcLimits]:
        """Every HTTP listener's limits and both gRPC listeners', with the one connection cap
        decided: raises the open-files limit first (logged)."""
        limits = self.config.http
        files = raise_open_files_limit()
        max_connections = limits.max_connections
        if max_connections is None:
            max_connections = default_max_connections(None if files is None else files[1])
        if files is not None:
            before, now = files
            logger.info(
                "open-files limit %s; at most %d connections per HTTP listener and per gRPC "
                "listener",
                f"raised from {before} to {now}" if now != before else now,
                max_connections,
            )
        return (
            replace(limits, max_connections=max_connections),
            replace(self.config.grpc, max_connections=max_connections),
        )

    async def _serve_http(
        self, name: str, app: Any, host: str, port: int, *, websockets: bool = False
    ) -> None:
        """Bind ``host:port`` and serve ``app`` there as listener ``name``, with the limits;
        ``websockets``: WebSocket upgrades reach the app (Truss's routes), else none do."""
        assert self._limits is not None  # set by start() first
        guard = ConnectionGuard(name, self._limits)
        sock = bind(host, port)
        self.addresses[name] = url_of(sock)
        server = Uvicorn(
            app,
            sock,
            graceful=self.config.shutdown.graceful_timeout,
            guard=guard,
            websockets=websockets,
        )
        await server.start()
        self._servers.append(server)
        self._guards[name] = guard

    def _observed(self, app: Any, routes: Any, *, normalize: bool = False) -> Any:
        """``app`` with every request's id, access line and span (``http/_access.py``)."""
        return AccessMiddleware(
            app, log=self.access_log, ids=self.request_ids, routes=routes, normalize=normalize
        )

    def connection_statistics(self) -> dict[str, ConnectionStatistics]:
        """Each HTTP listener's connections and limit counters, by listener name."""
        return {name: guard.statistics() for name, guard in self._guards.items()}

    async def _start_management(self) -> None:
        """The management API, REST and gRPC, on the management host (loopback by default)."""
        config = self.config
        urls = UrlPolicy(config.registration, start_paths=self.paths)
        self.management = Management(self.dataplane.repository, urls=urls)
        app: Any = ManagementApp(self.management, authorizer=self.authorizer)
        if self.authorizer is not None:
            app = AuthMiddleware(app, self.authorizer, management_rule, render_unauthenticated)
        app = BrowserGuard(
            app,
            allowed_hosts=config.management.allowed_hosts,
            allowed_origins=config.management.allowed_origins,
        )  # a web page's request is refused before anything, key checks included
        app = self._observed(app, MANAGEMENT_ROUTES, normalize=True)  # and logged
        listeners = config.listeners
        await self._serve_http(
            "http-management", app, listeners.management_host, listeners.management_port
        )
        grpc_server = GrpcServer(
            [ManagementService(self.management).service()],
            host=listeners.management_host,
            port=listeners.grpc_management_port,
            max_message_size=config.protocols.grpc_max_message_size,
            grace=config.shutdown.graceful_timeout,
            relay=False,  # grpc.aio: management calls are few
            authorize=None
            if self.authorizer is None
            else functools.partial(self.authorizer.check_metadata, kind="management"),
            limits=self._grpc_limits,
            access=(self.access_log, self.request_ids),
        )
        self.addresses["grpc-management"] = await grpc_server.start()
        self._servers.append(grpc_server)
        self._grpc["grpc-management"] = grpc_server
        # Where to go instead, for the inference listeners' refusal to load or unload.
        self.dataplane.repository.control.management = (
            f"{self.addresses['http-management']}, gRPC {self.addresses['grpc-management']}"
        )

    async def _start_metrics(self) -> None:
        """The metrics listener (``GET /metrics``) on the metrics host (loopback by default)."""
        collector = PodiumCollector(
            self.dataplane,
            connections=self.connection_statistics,
            grpc_connections=self.grpc_connections,
            access_log=self.access_log,
        )
        more = []
        if self.config.logs.ts_metrics == "prometheus":
            more.append(TorchServeCollector(self.dataplane, self.ts_metrics))
        app = MetricsApp(metrics_registry(collector, *more))
        listeners = self.config.listeners
        await self._serve_http("http-metrics", app, listeners.metrics_host, listeners.metrics_port)

    def grpc_connections(self) -> dict[str, int | None]:
        """Each gRPC listener's open connections (None where grpc does not say), by name."""
        return {name: server.open_connections() for name, server in self._grpc.items()}

    # -- stopping ------------------------------------------------------------------------

    def signal(self, signum: int) -> None:
        """A stop signal (``SIGTERM``, ``SIGINT``): the first begins the shutdown
        (:meth:`signalled` returns), the next one stops at once (:meth:`Shutdown.force`)."""
        if self._signal is None:
            self._signal = signum
            self.dataplane.flight.begin()  # not ready from this moment, start-up included
            self._signalled.set()
        elif self._shutdown is not None:
            self._shutdown.force(signum)
        else:  # still starting: nothing to drain; exit at once, worker processes killed first
            with contextlib.suppress(Exception):
                self.kill_workers()
            exit_now(128 + signum, "a second signal while starting", shut_logging=False)

    async def signalled(self) -> int:
        """Wait for the first stop signal; its number."""
        await self._signalled.wait()
        assert self._signal is not None
        return self._signal

    async def shutdown(self, signum: int | None = None) -> int:
        """Stop as ``docs/operations.md`` says (:class:`~._shutdown.Shutdown`): not ready at
        once, new connections refused after ``--shutdown-delay``, calls in flight drained for
        up to ``--graceful-timeout``, the rest cut, workers stopped; the exit code (0, or
        128 + the signal's number when a second signal forced it)."""
        self._shutdown = Shutdown(
            self.dataplane,
            self._servers,
            delay=delay_for(self.config.shutdown.shutdown_delay),
            graceful=self.config.shutdown.graceful_timeout,
            close=self._close,
            kill_workers=self.kill_workers,
        )
        return await self._shutdown.run(signum)

    async def stop(self) -> None:
        """Stop accepting, let in-flight requests finish (bounded), then close the models."""
        await asyncio.gather(*(server.stop() for server in self._servers))
        await self._close()

    async def _close(self) -> None:
        if self._ts_log_task is not None:  # the lines of the last interval are written too
            self._ts_log_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ts_log_task
            self._ts_log_task = None
            if self._ts_log is not None:
                self._ts_log.flush()
        await self.dataplane.close()  # background loads and scaling, then the models
        self.access_log.close()  # every line made and written; later ones at once
        if self.authorizer is not None:
            self.authorizer.remove_file()
        self.executor.shutdown(wait=False, cancel_futures=True)
        if self.tracing is not None:  # the spans still waiting are exported
            tracing, self.tracing = self.tracing, None
            await asyncio.to_thread(tracing.close)

    def kill_workers(self) -> int:
        """Kill every worker process now (a forced stop); how many were sent SIGKILL."""
        killed = 0
        for mv in self.dataplane.repository.versions():
            for info in mv.workers():
                if info.kind == "process" and info.pid and info.pid != os.getpid():
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(info.pid, signal.SIGKILL)
                        killed += 1
        return killed
