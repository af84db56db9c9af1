"""Stopping as Kubernetes expects: not ready at once, then drained, then cut, then gone.

On the first ``SIGTERM`` / ``SIGINT`` (:meth:`Shutdown.run`; ``docs/operations.md``):

1. **not ready** at once: ``/v2/health/ready`` 503, TorchServe's ``/ping`` 500 ``Unhealthy``,
   gRPC ``ServerReady`` false, TorchServe's ``Ping`` ``Unhealthy``, ``grpc.health.v1`` ``NOT_SERVING``.
   Liveness stays true. The listeners still take connections for ``--shutdown-delay`` seconds:
   endpoints and load balancers learn of the unreadiness late, and a request they route here
   meanwhile is served instead of refused.
2. **drain**: the listeners refuse new connections (HTTP: the listening socket is closed, idle
   keep-alive connections too, the others close after their response; gRPC: ``GOAWAY``, new
   calls ``UNAVAILABLE``); calls in flight and open streams get up to ``--graceful-timeout``
   seconds to finish.
3. **cut**: the calls still running in the data plane fail with ``ShuttingDown`` (HTTP 503,
   or an error event / line at the end of a stream already under way; gRPC ``UNAVAILABLE``
   "server shutting down: ..."); :data:`CUT_MARGIN` seconds later, what the listeners still
   hold is closed (HTTP connections closed, gRPC calls cancelled with ``UNAVAILABLE``).
4. **gone**: worker processes and the models stop; what was drained and what was cut is logged,
   per protocol and model; the process exits 0.

A second signal stops at once: everything still running is cut, worker processes are killed,
and the process exits with 128 + the signal's number (130 for ``SIGINT``, 143 for ``SIGTERM``,
as a shell reports a process killed by it), within :data:`FORCE_LIMIT` seconds whatever happens.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Protocol

from ..dataplane import DataPlane, FlightReport
from ._exits import exit_now

__all__ = ["CUT_MARGIN", "FORCE_LIMIT", "KUBERNETES_DELAY", "Listener", "Shutdown", "delay_for"]

logger = logging.getLogger("podium")

#: Seconds between the cut of the calls in the data plane and the close of what the listeners
#: still hold (time for the cut calls' errors to be sent); a call still running halfway through
#: is cancelled again (sync model code holds its caller at a first cancellation).
CUT_MARGIN = 1.0
#: Seconds a second signal gives the process before it exits regardless.
FORCE_LIMIT = 3.0
#: ``--shutdown-delay`` where none is given and the server runs in a Kubernetes pod: endpoints
#: are updated while the pod is told to stop, and kube-proxy, ingresses and load balancers take
#: a few seconds to follow.
KUBERNETES_DELAY = 5.0


def delay_for(configured: float | None, environ: Mapping[str, str] | None = None) -> float:
    """``--shutdown-delay`` as given, else KUBERNETES_DELAY in a Kubernetes pod (it sets
    ``KUBERNETES_SERVICE_HOST`` in every container) and 0 elsewhere, where nothing routes by
    readiness and waiting would only delay the stop."""
    if configured is not None:
        return configured
    env = os.environ if environ is None else environ
    return KUBERNETES_DELAY if env.get("KUBERNETES_SERVICE_HOST") else 0.0


class Listener(Protocol):
    """A listener as the shutdown drives it (the HTTP and gRPC servers)."""

    def not_serving(self) -> None:
        """Health says not serving (calls are still taken)."""

    async def stop(self, grace: float | None = None) -> None:
        """Refuse new connections; give what is open ``grace`` seconds, then close it."""

    async def abort(self) -> None:
        """Close everything now."""


class Shutdown:
    """One shutdown of a running server: its ``dataplane`` and ``listeners``, ``delay`` and
    ``graceful`` seconds (``--shutdown-delay``, ``--graceful-timeout``); ``kill_workers``
    kills every worker process (a forced stop); ``close`` stops the models (and the rest).
    """

    def __init__(
        self,
        dataplane: DataPlane,
        listeners: Sequence[Listener],
        *,
        delay: float,
        graceful: float,
        close: Callable[[], Awaitable[None]],
        kill_workers: Callable[[], int],
    ) -> None:
        self.dataplane = dataplane
        self.listeners = list(listeners)
        self.delay = delay
        self.graceful = graceful
        self._close = close
        self._kill_workers = kill_workers
        self._forced = asyncio.Event()
        self._signal: int | None = None
        self._forced_by: int | None = None
        self._watchdog: threading.Timer | None = None

    @property
    def exit_code(self) -> int:
        """0 after a graceful stop; 128 + the signal's number after a forced one."""
        return 0 if self._forced_by is None else 128 + self._forced_by

    def force(self, signum: int) -> None:
        """A second signal: stop at once (whatever happens, the process exits within
        FORCE_LIMIT seconds, with :attr:`exit_code`)."""
        if self._forced_by is not None:
            return
        self._forced_by = signum
        logger.warning(
            "%s again: stopping at once; calls still running are cut, worker processes killed",
            _name(signum),
        )
        self._forced.set()
        why = f"still not stopped {FORCE_LIMIT:g} s after the second signal"
        self._watchdog = threading.Timer(
            FORCE_LIMIT, exit_now, (self.exit_code, why), {"shut_logging": False}
        )
        self._watchdog.daemon = True
        self._watchdog.start()

    async def run(self, signum: int | None = None) -> int:
        """Stop (see the module docstring); the exit code."""
        started = time.monotonic()
        flight = self.dataplane.flight
        flight.begin()
        for listener in self.listeners:
            listener.not_serving()
        report = flight.report
        why = f"on {_name(signum)}" if signum is not None else "on request"
        if self.delay > 0 and not self._forced.is_set():
            logger.info(
                "shutting down %s: not ready from now on; %s call(s) in flight; still taking "
                "new connections for %g s (--shutdown-delay), so that load balancers stop "
                "sending first",
                why,
                FlightReport.describe(report.running),
                self.delay,
            )
            await self._wait(asyncio.sleep(self.delay), self.delay)
        else:
            logger.info(
                "shutting down %s: not ready from now on; %s call(s) in flight",
                why,
                FlightReport.describe(report.running),
            )
        running = len(flight.running)
        if running and not self._forced.is_set():
            logger.info(
                "refusing new connections; %d call(s) in flight get up to %g s to finish "
                "(--graceful-timeout)",
                running,
                self.graceful,
            )
        elif not self._forced.is_set():
            logger.info("refusing new connections")
        grace = 0.0 if self._forced.is_set() else self.graceful + CUT_MARGIN
        stops = [asyncio.ensure_future(listener.stop(grace)) for listener in self.listeners]
        if not self._forced.is_set():
            await self._wait(flight.idle(), self.graceful)
        if flight.running:
            await self._cut()
        if stops and not self._forced.is_set():
            # What the listeners still hold is closed by their own grace, at the latest.
            await self._wait(asyncio.wait(stops), grace + CUT_MARGIN)
        if self._forced.is_set():
            await self._abort()
        if stops:  # an abort ends them at once; bounded all the same
            _, pending = await asyncio.wait(stops, timeout=FORCE_LIMIT)
            for stop in pending:
                stop.cancel()
            await asyncio.gather(*stops, return_exceptions=True)
        if self._forced.is_set():
            killed = self._kill_workers()
            if killed:
                logger.warning("killed %d worker process(es)", killed)
        try:
            async with asyncio.timeout(FORCE_LIMIT if self._forced.is_set() else None):
                await self._close()
        except TimeoutError:
            logger.warning("the models did not stop within %g s; leaving them", FORCE_LIMIT)
        logger.info(
            "stopped in %.1f s: %s call(s) finished while draining, %s cut",
            time.monotonic() - started,
            FlightReport.describe(report.drained),
            FlightReport.describe(report.cut),
        )
        # After a second signal the watchdog stays: it bounds the process's exit too (what
        # the caller waits for after this, threads of model code included).
        return self.exit_code

    async def _wait(self, work: Awaitable[object], seconds: float) -> None:
        """``work``, for up to ``seconds``, or until a second signal."""
        task = asyncio.ensure_future(work)
        forced = asyncio.ensure_future(self._forced.wait())
        try:
            await asyncio.wait([task, forced], timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pending in (task, forced):
                if not pending.done():
                    pending.cancel()
            await asyncio.gather(task, forced, return_exceptions=True)

    async def _cut(self) -> None:
        """Cut the calls still running in the data plane; again, halfway through CUT_MARGIN,
        those still there."""
        flight = self.dataplane.flight
        if self._forced.is_set():
            reason = "was cut: a second stop signal told the server to stop at once"
        else:
            reason = f"did not finish within --graceful-timeout {self.graceful:g} s"
        logger.warning(
            "cutting %s call(s) still running: %s",
            FlightReport.describe(flight.counts()),
            reason.removeprefix("was cut: "),
        )
        flight.cut(reason)
        if not self._forced.is_set():
            await self._wait(flight.idle(), CUT_MARGIN / 2)
        if flight.running:
            flight.cut(reason)  # sync model code held its caller at the first cancellation
            await self._wait(flight.idle(), CUT_MARGIN / 2)

    async def _abort(self) -> None:
        flight = self.dataplane.flight
        if flight.running:
            await self._cut()
        await asyncio.gather(
            *(listener.abort() for listener in self.listeners), return_exceptions=True
        )


def _name(signum: int | None) -> str:
    if signum is None:
        return "a stop"
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
