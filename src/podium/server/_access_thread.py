"""The access log's own thread: access lines are made and written off the event loop.

:class:`LineThread` takes each request that ended (an :class:`~._access.Access`, handed over
by :meth:`LineThread.add` as it ends) and hands them to a thread of its own, which makes their
lines (the formatter's work: the route, the path, the text or JSON) and writes them. The loop
pays one ``deque.append`` per request and never wakes the thread: the thread looks every
:data:`INTERVAL` (10 ms) and writes everything that piled up in one write (a wake-up per
request or turn, as a ``queue.Queue`` gives, cost the loop a system call and a switch of
threads each: more than the line it saved). So a line appears up to 10 ms after its request
ended. The interval also bounds how long the thread runs at once, holding the GIL and, where
it shares a CPU with the loop's thread, the CPU: an interval's lines. At 50 ms (hundreds of
lines under load) the loop waited milliseconds each time, and the requests of that moment made
the server's p99; shorter than 10 ms, the wake-ups cost more than they gave (bench/RESULTS.md
§70). The thread gathers the lines of many turns of the loop itself, so the loop keeps no
turn's buffer for them (a callback per turn, and a list handed over, cost more than the
appends). A thread that found nothing to write sleeps until the next line is handed over (the
loop then wakes it, once: the thread then gathers for an interval again), so an idle server's
log thread does not wake at all.

It is bounded: at most ``limit`` lines wait for the thread. A line that finds no room is
dropped and counted (:attr:`LineThread.dropped`, the metric
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
#: Short enough that an interval's lines hold the GIL briefly (see the module's docstring).
INTERVAL = 0.01
#: The longest a flush waits for the thread (seconds): a log that is stuck does not hold exit.
FLUSH_WAIT = 5.0


class LineThread:
    """Hands ended requests to ``write`` (lists of them: it makes and writes their lines) on a
    thread of its own, started at the first; at most ``limit`` requests wait. The thread
    writes what waits every ``interval`` seconds (sooner past half of ``limit``)."""

    __slots__ = (
        "_write",
        "limit",
        "interval",
        "_waiting",
        "_wake",
        "_thread",
        "_lock",
        "_stop",
        "_idle",
        "_writing",
        "_half",
        "dropped",
        "closed",
    )

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
        self._waiting: collections.deque[Any] = collections.deque()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # starting the thread
        self._stop = False
        # the thread is not started yet, or found nothing to write and waits for the next
        # add() to wake it (add() starts or wakes it: _rouse)
        self._idle = True
        # lines a drain has taken and not written yet (still counted: they still wait), set
        # before they are taken from the queue (so that a line is never counted in neither)
        self._writing = 0
        # the queue's length that wakes the thread before its interval is out: past half
        self._half = (limit >> 1) + 1
        #: lines dropped because ``limit`` lines were waiting
        self.dropped = 0
        #: closed: lines are written at once, on the caller's thread
        self.closed = False

    @property
    def queued(self) -> int:
        """Lines handed over and not written yet."""
        return len(self._waiting) + self._writing

    def add(self, ended: Any) -> None:
        """Hand one ended request over (from one thread: the loop's); dropped and counted if
        ``limit`` lines wait already."""
        waiting = self._waiting
        if self.closed or len(waiting) + self._writing >= self.limit:
            self._refuse(ended)
            return
        waiting.append(ended)
        # (the flag read after appending: see _run)
        if self._idle:
            self._rouse()  # the thread gathers for an interval, then writes
        elif len(waiting) == self._half:
            self._wake.set()  # the queue fills up: written at once (woken as it crosses half)

    def _refuse(self, ended: Any) -> None:
        if self.closed:
            self._write([ended])
        else:
            self.dropped += 1

    def _rouse(self) -> None:
        """Start the thread, or wake it from its sleep with nothing to write."""
        self._idle = False
        if self._thread is None:
            self._start()
        else:
            self._wake.set()

    def put(self, ended: list[Any]) -> None:
        """Hand ``ended`` over, each as :meth:`add` does (what does not fit under ``limit`` is
        dropped and counted)."""
        for item in ended:
            self.add(item)

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
            self._drain()
            if stop:
                return
            if not self._waiting:
                # Nothing waits: sleep until put() (or flush, close) wakes the thread. The flag
                # is set before the queue is looked at again, so a line added in between is
                # either seen here or wakes the thread (add reads the flag after appending).
                self._idle = True
                if not self._waiting and not self._stop:
                    wake.wait()
                self._idle = False
                if not self._stop:
                    wake.clear()  # (a close: no interval to wait for)

    def _drain(self) -> int:
        """Write every line waiting, in one call; how many lines that was."""
        waiting = self._waiting
        count = len(waiting)  # (what is added meanwhile waits for the next drain)
        if not count:
            return 0
        # (two drains at once only at exit: flush(here=True) while the thread waits for the
        # writer's lock; each counts its own lines until they are written)
        self._writing += count
        batch: list[Any] = []
        keep = batch.append
        try:
            for _ in range(count):
                keep(waiting.popleft())
        except IndexError:  # another drain took the rest (flush's, at exit)
            pass
        try:
            self._write(batch)
        except Exception:  # noqa: S110 - a line that cannot be made is lost, as a handler's
            pass
        finally:
            self._writing -= count
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
        self._drain()
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
