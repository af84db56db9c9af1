"""The access log's own thread: access lines are made and written off the event loop.

:class:`LineThread` takes the requests that ended in one turn of the event loop (a list of
:class:`~._access.Access`) and hands them to a thread of its own, which makes their lines (the
formatter's work: the route, the path, the text or JSON) and writes them, several turns in one
write when they have piled up. The loop pays one ``put`` per turn.

It is bounded: at most ``limit`` lines wait for the thread. A turn that finds no room drops
the lines that do not fit and counts them (:attr:`LineThread.dropped`, the metric
``podium_access_log_dropped_lines``): a slow log (a full disk, a blocked pipe) never blocks a
request nor grows the server's memory. :meth:`LineThread.flush` waits until every line handed
over is written (at shutdown, and at exit through ``logging.shutdown``, which holds the
writer's lock: then the caller writes what waits itself), and :meth:`LineThread.close` ends
the thread.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["MAX_QUEUED_LINES", "LineThread"]

#: The most access lines waiting for the thread; past it, lines are dropped and counted.
MAX_QUEUED_LINES = 10_000
#: The longest a flush waits for the thread (seconds): a log that is stuck does not hold exit.
FLUSH_WAIT = 5.0


class LineThread:
    """Hands lists of ended requests to ``write`` (which makes and writes their lines) on a
    thread of its own, started at the first list; at most ``limit`` requests wait."""

    def __init__(self, write: Callable[[list[Any]], object], limit: int = MAX_QUEUED_LINES):
        if limit < 1:
            raise ValueError(f"the access log's queue holds at least one line, not {limit}")
        self._write = write
        self.limit = limit
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # starting the thread
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
        room = self.limit - self.queued
        if len(ended) > room:
            self.dropped += len(ended) - max(room, 0)
            if room <= 0:
                return
            ended = ended[:room]
        self._put += len(ended)
        self._queue.put(ended)
        if self._thread is None:
            self._start()

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                thread = threading.Thread(target=self._run, name="podium-access-log", daemon=True)
                thread.start()
                self._thread = thread

    def _run(self) -> None:
        get, get_nowait = self._queue.get, self._queue.get_nowait
        while True:
            item = get()
            batch: list[Any] = []
            markers: list[threading.Event] = []
            stop = False
            while True:  # what piled up goes in one write
                if item is None:
                    stop = True
                elif type(item) is list:
                    batch.extend(item)
                else:
                    markers.append(item)
                try:
                    item = get_nowait()
                except queue.Empty:
                    break
            if batch:
                try:
                    self._write(batch)
                except Exception:  # noqa: S110 - a line that cannot be made is lost, as a handler's
                    pass
                finally:
                    self._done += len(batch)
            for marker in markers:
                marker.set()
            if stop:
                return

    def flush(self, timeout: float = FLUSH_WAIT, *, here: bool = False) -> bool:
        """Write every line handed over so far, in order: wait (at most ``timeout`` seconds)
        for the thread to reach what was handed over until now. ``here``: write what still
        waits on the calling thread instead (at exit, where the caller holds the lock the
        thread's writes need). Whether nothing is left."""
        thread = self._thread
        if thread is threading.current_thread():
            return False
        if thread is not None and thread.is_alive() and not here:
            marker = threading.Event()
            self._queue.put(marker)
            if marker.wait(timeout):
                return self.queued == 0
        batch: list[Any] = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if type(item) is list:
                batch.extend(item)
            elif item is not None:
                item.set()
        if batch:
            try:
                self._write(batch)
            except Exception:  # noqa: S110 - lost, as in the thread
                pass
            self._done_here += len(batch)
        return self.queued == 0

    def close(self, timeout: float = FLUSH_WAIT) -> None:
        """Write what waits and end the thread; lines handed over later are written at once,
        on the caller's thread."""
        self.closed = True
        thread = self._thread
        if thread is not None:
            self._queue.put(None)
            if thread is not threading.current_thread():
                thread.join(timeout)
        self.flush(timeout, here=True)  # what a stuck thread left
