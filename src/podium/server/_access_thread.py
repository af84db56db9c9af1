"""The access log's own thread: access lines are made and written off the event loop.

:class:`LineThread` takes the requests that ended in one turn of the event loop (a list of
:class:`~._access.Access`) and hands them to a thread of its own, which makes their lines (the
formatter's work: the route, the path, the text or JSON) and writes them. The loop pays one
``deque.append`` per turn and never wakes the thread: the thread looks every
:data:`INTERVAL` (50 ms) and writes everything that piled up in one write (a wake-up per
turn, as a ``queue.Queue`` gives, cost the loop a system call and a switch of threads per turn:
more than the line it saved). So a line appears up to 50 ms after its request ended. A thread
that found nothing to write sleeps until the next list is handed over (the loop then wakes it,
once: the thread then gathers for an interval again), so an idle server's log thread does not
wake at all.

It is bounded: at most ``limit`` lines wait for the thread. A turn that finds no room drops
the lines that do not fit and counts them (:attr:`LineThread.dropped`, the metric
``podium_access_log_dropped_lines``): a slow log (a full disk, a blocked pipe) never blocks a
request nor grows the server's memory. :meth:`LineThread.flush` waits until every line handed
over is written (at shutdown, and at exit through ``logging.shutdown``, which holds the
writer's lock: then the caller writes what waits itself), and :meth:`LineThread.close` ends
the thread.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["MAX_QUEUED_LINES", "LineThread"]

#: The most access lines waiting for the thread; past it, lines are dropped and counted.
MAX_QUEUED_LINES = 10_000
#: How often the thread looks for lines to write (seconds): the loop never wakes it (a wake-up
#: per turn costs the loop a system call and a switch of threads), except past half the bound.
INTERVAL = 0.05
#: The longest a flush waits for the thread (seconds): a log that is stuck does not hold exit.
FLUSH_WAIT = 5.0


class LineThread:
    """Hands lists of ended requests to ``write`` (which makes and writes their lines) on a
    thread of its own, started at the first list; at most ``limit`` requests wait. The thread
    writes what waits every ``interval`` seconds (sooner past half of ``limit``)."""

    def __init__(
        self,
        write: Callable[[list[Any]], object],
        limit: int = MAX_QUEUED_LINES,
        interval: float = INTERVAL,
    ):
        if limit < 1:
            raise ValueError(f"the access log's queue holds at least one line, not {limit}")
        self._write = write
        self.limit = limit
        self.interval = interval
        # appended by the loop's thread, taken from the left by the writer (both atomic)
        self._waiting: collections.deque[list[Any]] = collections.deque()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # starting the thread
        self._stop = False
        # the thread found nothing to write and waits for the next put() to wake it
        self._idle = False
        # lines put (by the loop's thread) and done (by the writer's): each written by one
        # thread only, so that their difference is exact without a lock
        self._put = 0
        self._done = 0
        self._done_here = 0  # (by flush's caller)
        #: lines dropped because ``limit`` lines were waiting
        self.dropped = 0
        #: closed: lines are written at once, on the caller's thread
        self.closed = False

    @property
    def queued(self) -> int:
        """Lines handed over and not written yet."""
        return self._put - self._done - self._done_here

    def put(self, ended: list[Any]) -> None:
        """Hand ``ended`` over (the loop's thread); what does not fit under ``limit`` is
        dropped and counted."""
        if self.closed:
            self._write(ended)
            return
        queued = self._put - self._done - self._done_here
        room = self.limit - queued
        if len(ended) > room:
            self.dropped += len(ended) - max(room, 0)
            if room <= 0:
                return
            ended = ended[:room]
        self._put += len(ended)
        self._waiting.append(ended)
        if self._thread is None:
            self._start()
        elif self._idle or queued + len(ended) > self.limit >> 1:
            # the thread sleeps with nothing to write (it gathers for an interval, then
            # writes), or the queue is filling up (it writes at once)
            self._idle = False
            self._wake.set()

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                thread = threading.Thread(target=self._run, name="podium-access-log", daemon=True)
                thread.start()
                self._thread = thread

    def _run(self) -> None:
        wake = self._wake
        while True:
            wake.wait(self.interval)
            wake.clear()
            stop = self._stop
            self._done += self._drain()
            if stop:
                return
            if not self._waiting:
                # Nothing waits: sleep until put() (or flush, close) wakes the thread. The flag
                # is set before the queue is looked at again, so a list put in between is
                # either seen here or wakes the thread (put reads the flag after appending).
                self._idle = True
                if not self._waiting and not self._stop:
                    wake.wait()
                self._idle = False
                if not self._stop:
                    wake.clear()  # (a close: no interval to wait for)

    def _drain(self) -> int:
        """Write every list waiting, in one call; how many lines that was."""
        waiting = self._waiting
        batch: list[Any] = []
        while True:
            try:
                batch.extend(waiting.popleft())
            except IndexError:
                break
        if batch:
            try:
                self._write(batch)
            except Exception:  # noqa: S110 - a line that cannot be made is lost, as a handler's
                pass
        return len(batch)

    def flush(self, timeout: float = FLUSH_WAIT, *, here: bool = False) -> bool:
        """Write every line handed over so far: wake the thread and wait (at most ``timeout``
        seconds) until it has written them. ``here``: write what still waits on the calling
        thread instead (at exit, where the caller holds the lock the thread's writes need).
        Whether nothing is left."""
        thread = self._thread
        if thread is threading.current_thread():
            return False
        if thread is not None and thread.is_alive() and not here:
            self._wake.set()
            end = time.monotonic() + timeout
            while self.queued and time.monotonic() < end:
                time.sleep(0.001)
            if not self.queued:
                return True
        self._done_here += self._drain()
        return self.queued == 0

    def close(self, timeout: float = FLUSH_WAIT) -> None:
        """Write what waits and end the thread; lines handed over later are written at once,
        on the caller's thread."""
        self.closed = True
        thread = self._thread
        if thread is not None:
            self._stop = True
            self._wake.set()
            if thread is not threading.current_thread():
                thread.join(timeout)
        self.flush(timeout, here=True)  # what a stuck thread left
