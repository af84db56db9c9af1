"""The inference calls in flight, and the server's shutdown as the data plane sees it.

Every call the data plane runs (:meth:`DataPlane.infer`; a stream from its first item to its
end) is registered here by the task that runs it, so that a shutdown can:

- turn readiness false while calls still run (:meth:`InFlight.begin`);
- wait for the calls in flight to finish (:meth:`InFlight.idle`);
- cut those still running when the grace is over (:meth:`InFlight.cut`): each task is
  cancelled, and the data plane turns that cancellation into :class:`~podium.errors.ShuttingDown`,
  which every front end answers as it answers any error (503, ``UNAVAILABLE``, an SSE error
  event, an error line at the end of a chunked stream); calls that arrive later are refused
  with it at once. A call still running a moment later is cancelled again (:meth:`InFlight.cut`
  once more): sync model code in a thread holds its caller at the first cancellation until it
  returns (``run_sync``), and a second one lets the caller go;
- say what it drained and what it cut, per protocol and model (:meth:`InFlight.report`).

Registering costs a call two dictionary operations and a ``current_task(loop)`` (with the loop
given: without it, Python 3.11 asks the OS for its pid on every call), or none where the front
end hands over the task it knows (the HTTP app's, as its connection started it); the counting
is done only once the server is stopping.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from types import TracebackType
from typing import Any

from ..errors import ShuttingDown, model_label
from ..runtime import VersionStats
from ..types import Call

__all__ = ["Counted", "FlightReport", "InFlight"]


def _label(call: Call) -> str:
    return f"{call.protocol.value} {model_label(call.model, call.version)}"


class FlightReport:
    """What a shutdown found: the calls in flight when it began (``running``), those that
    finished while it drained (``drained``), and those it cut (``cut``), each counted by
    protocol and model (``"oip_rest model 'echo'"``)."""

    __slots__ = ("running", "drained", "cut")

    def __init__(self) -> None:
        self.running: Counter[str] = Counter()
        self.drained: Counter[str] = Counter()
        self.cut: Counter[str] = Counter()

    @staticmethod
    def describe(counts: Counter[str]) -> str:
        """``"3 (oip_rest model 'a': 2, truss model 'b': 1)"``, or ``"0"``."""
        total = sum(counts.values())
        if not total:
            return "0"
        parts = ", ".join(f"{label}: {n}" for label, n in sorted(counts.items()))
        return f"{total} ({parts})"


class InFlight:
    """The data plane's calls in flight, by the task running each (see the module docstring)."""

    __slots__ = ("running", "stopping", "closed", "report", "loop", "_cut", "_reason", "_idle")

    def __init__(self) -> None:
        #: every call running in the data plane, by the task running it
        self.running: dict[asyncio.Task[Any], Call] = {}
        #: the server is stopping: it is not ready, but still takes calls
        self.stopping = False
        #: the grace is over: calls still running were cut, new ones are refused
        self.closed = False
        self.report = FlightReport()
        #: the event loop the calls run on, as last seen (:meth:`current`)
        self.loop: asyncio.AbstractEventLoop | None = None
        self._cut: dict[asyncio.Task[Any], int] = {}  # each task cut: how many times
        self._reason = ""
        self._idle: asyncio.Event | None = None

    # -- per call ---------------------------------------------------------------------------

    def enter(self, call: Call, task: asyncio.Task[Any] | None = None) -> asyncio.Task[Any] | None:
        """Register ``call`` under the current task; the task (for :meth:`leave`), or None when
        that task already runs a call (the outer one stands for both). ``ShuttingDown`` once
        the grace is over. ``task``: the current task, where the caller knows it (the HTTP
        front end's, as the connection started it): not looked up again."""
        if self.closed:
            raise self.refusal(call)
        if task is None:
            task = self.current()
        if task is None or self.running.setdefault(task, call) is not call:
            return None
        return task

    def current(self) -> asyncio.Task[Any] | None:
        """The task running now. The loop is looked up only the first time, or when another
        one runs (the data plane's calls all run on one loop)."""
        task = asyncio.current_task(self.loop or self.running_loop())
        if task is None:  # the loop seen last is not the one running
            task = asyncio.current_task(self.running_loop())
        return task

    def running_loop(self) -> asyncio.AbstractEventLoop:
        self.loop = loop = asyncio.get_running_loop()
        return loop

    def leave(self, task: asyncio.Task[Any]) -> None:
        call = self.running.pop(task)
        if self.stopping:
            self.ended(task, call)

    @staticmethod
    def refusal(call: Call) -> ShuttingDown:
        """The error of a call that comes once the grace is over."""
        return ShuttingDown(f"server shutting down: no new calls are taken (model '{call.model}')")

    def cut_error(self, task: asyncio.Task[Any]) -> ShuttingDown | None:
        """For a call whose task was cancelled: the error it ends with when the cancellation is
        this shutdown's cut (the cancellation is then taken back), else None (the client left,
        or something else cancelled it: the cancellation goes on)."""
        times = self._cut.get(task)
        if times is None:
            return None
        for _ in range(times):
            task.uncancel()
        call = self.running.get(task)
        what = f"the call to model '{call.model}'" if call is not None else "the call"
        return ShuttingDown(f"server shutting down: {what} {self._reason}")

    def ended(self, task: asyncio.Task[Any], call: Call) -> None:
        """``call``, run by ``task``, left the data plane while the server stops: count it."""
        label = _label(call)
        if self._cut.pop(task, None) is not None:
            self.report.cut[label] += 1
        else:
            self.report.drained[label] += 1
        if not self.running and self._idle is not None:
            self._idle.set()

    def counts(self) -> Counter[str]:
        """The calls running now, by protocol and model."""
        return Counter(_label(call) for call in self.running.values())

    # -- the shutdown -----------------------------------------------------------------------

    def begin(self) -> None:
        """The server is stopping: readiness turns false; calls go on and new ones are taken.
        The calls running now are counted in :attr:`report`."""
        if self.stopping:
            return
        self.stopping = True
        self.report.running.update(self.counts())

    async def idle(self) -> None:
        """Return once no call is in flight (bound it with ``asyncio.timeout``)."""
        while self.running:
            self._idle = asyncio.Event()
            await self._idle.wait()

    def cut(self, reason: str) -> int:
        """Cut every call still running and refuse new ones; how many were cut. Each fails with
        ``ShuttingDown``: "server shutting down: the call to model 'm' " and ``reason`` (e.g.
        "did not finish within --graceful-timeout 30 s"). Called again, it cancels again the
        calls that are still running (the first reason stays)."""
        self.begin()
        self.closed = True
        if not self._reason:
            self._reason = reason
        tasks = list(self.running)
        cut = self._cut
        for task in tasks:
            cut[task] = cut.get(task, 0) + 1
            task.cancel()
        return len(tasks)


class Counted:
    """A stream (or a model's endpoint) from its first item to its end, as one call: in flight
    under the task that reads it, and counted in the version's ``stats`` by its protocol,
    outcome and duration (``stream``: and as a stream open while it runs). Used as ``with``
    around the reading: a cancellation that is the shutdown's cut ends it with that error."""

    __slots__ = ("_flight", "_call", "_stats", "_stream", "_task", "_start")

    def __init__(self, flight: InFlight, call: Call, stats: VersionStats, *, stream: bool) -> None:
        self._flight = flight
        self._call = call
        self._stats = stats
        self._stream = stream

    def __enter__(self) -> None:
        self._task = self._flight.enter(self._call)
        self._start = time.perf_counter_ns()
        if self._stream:
            self._stats.streams_open += 1

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        stats, task = self._stats, self._task
        counts = stats.protocols[self._call.protocol.index]
        try:
            if exc is None:
                stats.last_ns = end = time.perf_counter_ns()
                counts.ok.add(end - self._start)
                return
            # GeneratorExit too: the reader stopped (the client left)
            counts.failed_with(exc, time.perf_counter_ns() - self._start)
            if isinstance(exc, asyncio.CancelledError) and task is not None:
                error = self._flight.cut_error(task)
                if error is not None:
                    raise error from None
        finally:
            if self._stream:
                stats.streams_open -= 1
            if task is not None:
                self._flight.leave(task)
