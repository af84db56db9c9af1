"""One HTTP listener: uvicorn on a socket Podium bound (:func:`bind`), without uvicorn's signal
handling, with the connection limits of a :class:`~._limits.ConnectionGuard` on every
connection, Podium's access middleware reading ``X-Forwarded-*`` itself, and a main loop that
sleeps while nothing happens. ``server/_runner.py`` makes one per listener."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from typing import Any

from ._limits import ConnectionGuard
from .http import AccessMiddleware, RootPath

__all__ = ["DATE_EVERY", "Uvicorn", "bind", "url_of"]

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


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


#: Seconds between two refreshes of an HTTP listener's ``Date`` header (uvicorn's own period).
DATE_EVERY = 1.0


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class Uvicorn:
    """uvicorn on a socket we bound, without its signal handling (we own the process's signals),
    with the connection limits of ``guard`` on every connection (see ``_limits``). It is a
    :class:`~._shutdown.Listener`: :meth:`stop` gives the connections open ``graceful`` seconds
    (or the grace it is given), then closes them."""

    def __init__(
        self,
        app: Any,
        sock: socket.socket,
        graceful: float,
        guard: ConnectionGuard,
        *,
        websockets: bool = False,
    ) -> None:
        import uvicorn

        # Podium's access middleware reads X-Forwarded-* itself, by uvicorn's own middleware
        # and only for a request that carries them (http/_access.py), under a root path too
        # (which only moves the path); other apps get uvicorn's
        inner: Any = app.app if isinstance(app, RootPath) else app
        forwarding = isinstance(inner, AccessMiddleware)
        config = uvicorn.Config(
            app,
            proxy_headers=not forwarding,
            loop="none",
            lifespan="off",
            log_config=None,
            access_log=False,
            server_header=False,
            # uvicorn's own last resort, after stop() closed the connections: it cancels the
            # requests left (annotated int, used as a float by wait_for)
            timeout_graceful_shutdown=graceful + 1,  # type: ignore[arg-type]
            # seconds, used as a float by uvicorn's call_later, though annotated int
            timeout_keep_alive=guard.limits.keep_alive_timeout,  # type: ignore[arg-type]
            http=guard.protocol,
            # WebSockets where the app serves them (the inference listener: Truss's), with
            # the websockets package (a dependency); elsewhere upgrades are plain requests
            ws="websockets-sansio" if websockets else "none",
        )
        if forwarding:
            inner.forwarded_from(config.forwarded_allow_ips)  # FORWARDED_ALLOW_IPS, as uvicorn's
        self.guard = guard

        class Server(uvicorn.Server):
            """uvicorn's server, with a main loop that sleeps while nothing happens.

            uvicorn's main loop wakes every 0.1 s to see whether it should exit, and every
            tenth time refreshes the ``Date`` header: ten wake-ups a second on every listener,
            idle or not. This one wakes every DATE_EVERY seconds for the ``Date`` header, and
            at once when ``should_exit`` is set (by :meth:`Uvicorn.stop` or anyone else)."""

            def __init__(self, config: uvicorn.Config) -> None:
                self._exiting = False
                self._wake: asyncio.Future[None] | None = None  # what main_loop waits on
                super().__init__(config)

            @property
            def should_exit(self) -> bool:
                return self._exiting

            @should_exit.setter
            def should_exit(self, value: bool) -> None:
                self._exiting = value
                if value and self._wake is not None:
                    _resolve(self._wake)

            def capture_signals(self) -> Any:
                return contextlib.nullcontext()

            async def main_loop(self) -> None:
                loop = asyncio.get_running_loop()
                # on_tick(0): a tick whose count is a multiple of 10 refreshes the Date header;
                # it answers True when the server should exit
                while not await self.on_tick(0):
                    # a future that the timer or should_exit resolves: no exception thrown into
                    # the task at every tick, as a timeout (a cancellation) would
                    self._wake = wake = loop.create_future()
                    timer = loop.call_later(DATE_EVERY, _resolve, wake)
                    await wake
                    timer.cancel()

        self.server = Server(config)
        _quiet_uvicorn()
        self.sock = sock
        self.graceful = graceful
        self.task: asyncio.Task[None] | None = None
        #: connections still open when the grace ran out, closed by :meth:`stop`
        self.closed_connections = 0

    async def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self.server.serve(sockets=[self.sock]))
        while not self.server.started:
            if self.task.done():
                await self.task
                raise RuntimeError("HTTP server stopped during start-up")
            await asyncio.sleep(0.01)

    def not_serving(self) -> None:
        """Nothing to do: HTTP readiness is the data plane's."""

    async def stop(self, grace: float | None = None) -> None:
        """Close the listening socket and the idle connections; the others close after their
        response. Those still open after ``grace`` seconds (``graceful`` when None) are closed."""
        grace = self.graceful if grace is None else grace
        server = self.server
        server.config.timeout_graceful_shutdown = grace + 1  # type: ignore[assignment]
        server.should_exit = True
        task = self.task
        if task is None:
            return
        try:
            async with asyncio.timeout(grace):
                await asyncio.shield(task)
        except TimeoutError:
            self._close_connections()
            await task

    async def abort(self) -> None:
        """Close every connection now; :meth:`stop` ends at once."""
        self.server.should_exit = True
        self.server.force_exit = True
        self._close_connections()

    def _close_connections(self) -> None:
        closed = 0
        for connection in list(self.server.server_state.connections):
            transport = getattr(connection, "transport", None)
            if transport is not None and not transport.is_closing():
                closed += 1
                transport.abort()  # a client not reading must not hold the stop up
        if closed:
            self.closed_connections += closed
            logger.warning(
                "%s: closed %d connection(s) still open after the grace (an upload still "
                "arriving, a response not read)",
                self.guard.name,
                closed,
            )


#: uvicorn's start and stop lines: one of each per listener (Podium runs several) and nothing
#: Podium's own ready, shutdown and stop lines do not say.
_UVICORN_LIFECYCLE = frozenset(
    {
        "Started server process [%d]",
        "Waiting for application startup.",
        "Application startup complete.",
        "Shutting down",
        "Waiting for application shutdown.",
        "Application shutdown complete.",
        "Finished server process [%d]",
        "Waiting for connections to close. (CTRL+C to force quit)",
        "Waiting for background tasks to complete. (CTRL+C to force quit)",
    }
)


def _not_lifecycle(record: logging.LogRecord) -> bool:
    return record.msg not in _UVICORN_LIFECYCLE


def _quiet_uvicorn() -> None:
    """Leave uvicorn's start and stop lines out of the log (its warnings and errors stay)."""
    logger = logging.getLogger("uvicorn.error")
    if _not_lifecycle not in logger.filters:
        logger.addFilter(_not_lifecycle)
