"""Start-up and shutdown: the one place where Podium's parts are built and wired together."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import socket
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..config import Secrets, ServerConfig
from ..dataplane import ControlPolicy, DataPlane, ModelControl
from ._auth import AuthMiddleware, Authorizer, inference_rule, management_rule, render_error
from ._guard import BrowserGuard, check_exposure
from ._limits import (
    ConnectionGuard,
    ConnectionLimits,
    ConnectionStatistics,
    default_max_connections,
    raise_open_files_limit,
)
from ._metrics import MetricsApp, PodiumCollector, metrics_registry
from ._requests import RequestSnapshots
from .grpc import GrpcServer, inference_services
from .grpc._management import management_service
from .http import HttpApp
from .management import Management, ManagementApp, UrlPolicy, render_unauthenticated

#: Seconds that calls and requests in flight get to finish when the server stops.
GRACE = 10

__all__ = ["Podium", "bind"]

logger = logging.getLogger("podium")


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket; port 0 picks a free one. Bound before the server reports ready."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


class _Uvicorn:
    """uvicorn on a socket we bound, without its signal handling (we own the process's signals),
    with the connection limits of ``guard`` on every connection (see ``_limits``)."""

    def __init__(
        self, app: Any, sock: socket.socket, graceful: int, guard: ConnectionGuard
    ) -> None:
        import uvicorn

        config = uvicorn.Config(
            app,
            loop="none",
            lifespan="off",
            log_config=None,
            access_log=False,
            server_header=False,
            timeout_graceful_shutdown=graceful,
            # seconds, used as a float by uvicorn's call_later, though annotated int
            timeout_keep_alive=guard.limits.keep_alive_timeout,  # type: ignore[arg-type]
            http=guard.protocol,
            ws="none",  # no WebSocket route: upgrades are served as plain HTTP requests
        )
        self.guard = guard

        class Server(uvicorn.Server):
            def capture_signals(self) -> Any:
                return contextlib.nullcontext()

        self.server = Server(config)
        self.sock = sock
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self.server.serve(sockets=[self.sock]))
        while not self.server.started:
            if self.task.done():
                await self.task
                raise RuntimeError("HTTP server stopped during start-up")
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        self.server.should_exit = True
        if self.task is not None:
            await self.task


class Podium:
    """A running Podium: data plane (over a registry) and listeners, built from a
    ``ServerConfig``."""

    def __init__(self, config: ServerConfig, paths: list[Path]) -> None:
        self.config = config
        self.paths = paths
        self.executor = ThreadPoolExecutor(config.threads, thread_name_prefix="podium-model")
        self.secrets = Secrets(config.secrets_dir)
        #: how request objects reach models in worker processes
        self.request_codec = RequestSnapshots()
        self.dataplane = DataPlane(
            secrets=self.secrets,
            executor=self.executor,
            codec=self.request_codec,
        )
        self.addresses: dict[str, str] = {}
        self._guards: dict[str, ConnectionGuard] = {}
        self._limits: ConnectionLimits | None = None
        self._servers: list[_Uvicorn | GrpcServer] = []
        self._grpc: dict[str, GrpcServer] = {}  # by listener name (their connections, for metrics)
        self.authorizer: Authorizer | None = None
        self.management: Management | None = None

    async def start(self, on_ready: Callable[[dict[str, str]], None] | None = None) -> None:
        """Import every model (raising ``DefinitionError``), bind, serve, then load the models."""
        loop = asyncio.get_running_loop()
        self.authorizer = self._keys()
        config = self.config
        check_exposure(
            config.management_host,
            keys=self.authorizer is not None,
            allow_open=config.allow_open_management,
            ports=f"ports {config.management_port} and {config.grpc_management_port}",
        )
        self._limits = self._connection_limits()
        repository = self.dataplane.repository
        repository.control = ControlPolicy(ModelControl(config.model_control))
        # for this process's extractions, start-up models' included
        repository.set_archive_limits(config.max_archive_size, config.max_archive_ratio)
        self._warn_model_control()
        # Importing user code runs it: never on the event loop.
        await loop.run_in_executor(self.executor, repository.add_paths, self.paths)
        inference_keys = self.authorizer if self.config.auth else None  # --auth: every listener
        app: Any = HttpApp(
            self.dataplane,
            max_request_size=self.config.max_request_size,
            sequence_header=self.config.sequence_header,
        )
        if inference_keys is not None:
            app = AuthMiddleware(app, inference_keys, inference_rule, render_error)
        await self._serve_http("http-inference", app, self.config.host, self.config.http_port)
        grpc_server = GrpcServer(
            inference_services(
                self.dataplane,
                stream_format=self.config.grpc_stream_format,
                output_contents=self.config.grpc_output_contents,
                sequence_header=self.config.sequence_header,
            ),
            host=self.config.host,
            port=self.config.grpc_port,
            max_message_size=self.config.grpc_max_message_size,
            grace=GRACE,
            threads=self.config.grpc_threads,
            authorize=None if inference_keys is None else self._authorize_inference,
        )
        self.addresses["grpc-inference"] = await grpc_server.start()
        self._servers.append(grpc_server)
        self._grpc["grpc-inference"] = grpc_server
        await self._start_management()
        if config.metrics:
            await self._start_metrics()
        await repository.load_all()
        grpc_server.health.changed()
        # Everything built so far lives as long as the server: keep it out of every future
        # garbage collection, so that a full collection does not stall requests (the p99).
        gc.collect()
        gc.freeze()
        listening = " ".join(f"{k} {v}" for k, v in self.addresses.items())
        versions = repository.versions()
        models = ", ".join(mv.label for mv in versions)
        failed = [mv for mv in versions if mv.reason]
        logger.info(
            "Podium is ready; listening on %s; serving %s", listening, models or "no models"
        )
        for mv in failed:
            logger.warning("%s is not ready: %s", mv.label, mv.reason)
        if on_ready is not None:
            on_ready(self.addresses)

    def _warn_model_control(self) -> None:
        """A warning when any client of the inference listeners may load and unload models."""
        config = self.config
        if config.model_control != ModelControl.INFERENCE.value:
            return
        if config.auth:
            logger.info(
                "model control is open on the inference listeners (--model-control inference): "
                "clients with the inference key can load and unload models"
            )
            return
        logger.warning(
            "model control is open on the inference listeners (--model-control inference) "
            "without --auth: every client that can reach the inference listeners (%s, HTTP "
            "port %s, gRPC port %s) can unload every model; add --auth, or leave model control "
            "to the management API",
            config.host,
            config.http_port,
            config.grpc_port,
        )

    def _keys(self) -> Authorizer | None:
        """The keys, written to the key file: for every listener with ``--auth``, for the
        management API by default (unless the default key file cannot be written: then a
        warning, and no keys), none with ``--no-auth``."""
        config = self.config
        if config.auth is False:
            return None
        try:
            made = Authorizer.create(config.key_file, expiration=config.token_expiration)
        except OSError as exc:
            if config.auth or config.key_file is not None:
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
            "every listener" if config.auth else "the management API",
            made.key_file,
        )
        return made

    def _connection_limits(self) -> ConnectionLimits:
        """Every HTTP listener's limits; raises the open-files limit first (logged)."""
        config = self.config
        files = raise_open_files_limit()
        max_connections = config.max_connections
        if max_connections is None:
            max_connections = default_max_connections(None if files is None else files[1])
        if files is not None:
            before, now = files
            logger.info(
                "open-files limit %s; at most %d connections per HTTP listener",
                f"raised from {before} to {now}" if now != before else now,
                max_connections,
            )
        return ConnectionLimits(
            max_url_size=config.max_url_size,
            max_header_size=config.max_header_size,
            max_headers=config.max_headers,
            header_timeout=config.header_timeout,
            keep_alive_timeout=config.keep_alive_timeout,
            body_timeout=config.body_timeout,
            min_body_rate=config.min_body_rate,
            max_connections=max_connections,
        )

    async def _serve_http(self, name: str, app: Any, host: str, port: int) -> None:
        """Bind ``host:port`` and serve ``app`` there as listener ``name``, with the limits."""
        assert self._limits is not None  # set by start() first
        guard = ConnectionGuard(name, self._limits)
        sock = bind(host, port)
        self.addresses[name] = _url(sock)
        server = _Uvicorn(app, sock, graceful=GRACE, guard=guard)
        await server.start()
        self._servers.append(server)
        self._guards[name] = guard

    def connection_statistics(self) -> dict[str, ConnectionStatistics]:
        """Each HTTP listener's connections and limit counters, by listener name."""
        return {name: guard.statistics() for name, guard in self._guards.items()}

    def _authorize_inference(self, metadata: Any) -> None:
        assert self.authorizer is not None
        self.authorizer.check_metadata(metadata, "inference")

    async def _start_management(self) -> None:
        """The management API, REST and gRPC, on the management host (loopback by default)."""
        config = self.config
        urls = UrlPolicy(
            model_store=config.model_store,
            allowed_urls=config.allowed_urls,
            max_download_size=config.max_download_size,
            download_timeout=config.download_timeout,
            start_paths=self.paths,
            allow_any_local_path=config.allow_any_local_path,
        )
        self.management = Management(self.dataplane.repository, urls=urls)
        app: Any = ManagementApp(self.management, authorizer=self.authorizer)
        if self.authorizer is not None:
            app = AuthMiddleware(app, self.authorizer, management_rule, render_unauthenticated)
        app = BrowserGuard(
            app,
            allowed_hosts=config.management_allowed_hosts,
            allowed_origins=config.management_allowed_origins,
        )  # outermost: a web page's request is refused before anything, key checks included
        await self._serve_http(
            "http-management", app, config.management_host, config.management_port
        )
        grpc_server = GrpcServer(
            [management_service(self.management, self.authorizer)],
            host=config.management_host,
            port=config.grpc_management_port,
            max_message_size=config.grpc_max_message_size,
            grace=GRACE,
            threads=0,  # grpc.aio: management calls are few, and none holds a thread
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
        )
        app = MetricsApp(metrics_registry(collector))
        await self._serve_http(
            "http-metrics", app, self.config.metrics_host, self.config.metrics_port
        )

    def grpc_connections(self) -> dict[str, int | None]:
        """Each gRPC listener's open connections (None where grpc does not say), by name."""
        return {name: server.open_connections() for name, server in self._grpc.items()}

    async def stop(self) -> None:
        """Stop accepting, let in-flight requests finish (bounded), then close the models."""
        await asyncio.gather(*(server.stop() for server in self._servers))
        await self.dataplane.close()  # background loads and scaling, then the models
        if self.authorizer is not None:
            self.authorizer.remove_file()
        self.executor.shutdown(wait=False, cancel_futures=True)
