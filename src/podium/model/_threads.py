"""Long-lived threads that run one instance's blocking calls, with batched completion signals.

Every contract's sync ``predict`` (or ``step``) runs here. Handed to a ``ThreadPoolExecutor``
instead, each call would cost a ``Future`` with its ``Condition``, ``asyncio.wrap_future``'s
chaining and a ``call_soon_threadsafe`` (a write that wakes the event loop), plus
``asyncio.shield``: as much server CPU again as a whole ``async def predict`` request
(bench/run.py, ``podium-sync``). :class:`CallThreads` does the same hand-off with less:

- the loop puts a call on a C ``SimpleQueue`` that long-lived threads read; a thread is added
  only when more calls are in flight than there are threads, so the threads number the most
  calls its caller ever let run at once (the predict slots): a model that is not thread-safe,
  at ``predict_concurrency`` 1, always runs on one and the same thread;
- a thread that finishes a call posts it to a completion list and wakes the loop only if no
  wake-up is pending already: calls that finish close together (several threads, or calls
  queued behind each other) cost one wake-up for all, read in one loop callback;
- a thread that finds the next call already queued runs it at once, without sleeping.

Cancellation keeps ``run_sync``'s promise: a call still queued never runs (the caller goes at
once); one already running cannot be stopped, so the cancellation waits for it to return, and
the caller's resources (a predict slot) are held exactly as long as the user's code runs; a
second cancellation lets the caller go (a shutdown cutting what still runs).

A caller with a deadline (a thread worker's ``response_timeout``) asks about its call by its
task, without a task or timer of its own per call: :meth:`CallThreads.started` (since when the
call runs: a deadline counts from there, not from a wait behind other calls),
:meth:`CallThreads.withdraw` (take back a call that has not started: it never runs) and
:meth:`CallThreads.detach` (a call past its deadline: its caller may leave at once on its
cancellation, and a callback hears when the call really returns, to free what it held).
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import itertools
import queue
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from .. import sched

__all__ = ["CallThreads"]

_STOP = None  # put once per thread on its queue: the thread returns
_names = itertools.count(1)


class _Call:
    """One blocking call: what to run and, once run, its outcome. Exactly one side takes its
    ``token`` (``list.pop`` is atomic under the GIL): a thread, which then runs it and reports
    it back, or the loop (its caller cancelled, or it withdrawn), and then it never runs."""

    __slots__ = (
        "counted",
        "fn",
        "args",
        "future",
        "inbox",
        "token",
        "started",
        "started_at",
        "withdrawn",
        "reported",
        "ended",
        "on_end",
        "result",
        "error",
    )

    def __init__(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        future: asyncio.Future[Any],
        inbox: _Inbox,
    ) -> None:
        self.fn = fn
        self.args = args
        self.future = future
        self.inbox = inbox
        self.token = [True]
        self.started = False  # a thread took the token (set after started_at)
        self.started_at = 0.0  # time.monotonic() when it did
        self.withdrawn = False  # the loop took the token before its caller was cancelled
        self.reported = False  # read back on the loop
        self.counted = True  # still counted in flight (not skipped, not read back)
        self.ended: asyncio.Future[None] | None = None  # a cancelled caller waits on it
        self.on_end: Callable[[], None] | None = None  # detached: told when it returns
        self.result: Any = None
        self.error: BaseException | None = None


class _Inbox:
    """Finished calls on their way back to one event loop: one wake-up for all that finish
    before the loop reads them."""

    __slots__ = ("loop", "done", "pending", "owner", "__weakref__")

    def __init__(self, loop: asyncio.AbstractEventLoop, owner: CallThreads) -> None:
        self.loop = loop
        self.owner = weakref.ref(owner)  # a pending wake-up must not keep the threads alive
        self.done: collections.deque[_Call] = collections.deque()
        self.pending = False  # a wake-up is on its way: the loop will read ``done``

    def post(self, call: _Call) -> None:
        """In a thread: hand ``call`` back. Appended first, the flag read after: a call
        appended while a read is pending is taken by that read, or finds the flag down (the
        read has begun) and wakes the loop once more."""
        self.done.append(call)
        if not self.pending:
            self.pending = True
            try:
                self.loop.call_soon_threadsafe(self.read)
            except RuntimeError:  # the loop is closed: nobody waits any more
                pass

    def read(self) -> None:
        """On the loop: settle the future of every finished call."""
        self.pending = False  # before reading: a call posted from now on wakes us again
        done = self.done
        owner = self.owner()
        while done:
            call = done.popleft()
            call.reported = True
            if call.counted:
                call.counted = False
                if owner is not None:
                    owner.in_flight -= 1
            future = call.future
            ended = call.ended
            if ended is not None and not ended.done():  # its caller, cancelled, waits
                ended.set_result(None)
            on_end = call.on_end
            if on_end is not None:  # detached: its caller left, what it held is freed now
                call.on_end = None
                on_end()
            if future.done():  # cancelled: nobody reads the outcome
                call.error = None
                continue
            if call.error is not None:
                future.set_exception(call.error)
                call.error = None  # no cycle through the traceback
            else:
                future.set_result(call.result)


def _serve(calls: queue.SimpleQueue[_Call | None]) -> None:
    """A thread's life: run calls until told to stop. It holds only the queue, so that the
    :class:`CallThreads` it serves can be collected (whose finalizer stops the threads)."""
    sched.batch_this_thread()  # woken by the loop, which holds the GIL: no cutting in (sched.py)
    while True:
        call = calls.get()
        if call is None:
            return
        try:
            call.token.pop()
        except IndexError:  # its caller took it back: it never runs, nobody waits for it
            del call
            continue
        call.started_at = time.monotonic()
        call.started = True
        try:
            call.result = call.fn(*call.args)
        except BaseException as exc:  # the caller gets whatever it raised
            call.error = exc
        call.inbox.post(call)
        del call


class CallThreads:
    """``threads`` long-lived threads running blocking calls in arrival order (see the module
    docstring), as many as the calls in flight have ever been, or at most ``limit`` (further
    calls wait in line for a thread). :meth:`close` stops them once the calls queued have run;
    so does collecting the object."""

    def __init__(self, name: str = "podium-model", *, limit: int | None = None) -> None:
        self._name = name
        self.limit = limit  # (checked)
        self._number = next(_names)
        #: calls queued or running (on the loop: a call leaves when read back, or at once when
        #: its caller is cancelled before it started)
        self.in_flight = 0
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._inboxes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Inbox] = (
            weakref.WeakKeyDictionary()
        )
        self._closed = False
        #: the call of each caller's task while it waits for it (:meth:`started`, ...)
        self._by_task: dict[asyncio.Task[Any], _Call] = {}
        weakref.finalize(self, _stop, self._calls, self._threads)

    @property
    def limit(self) -> int | None:
        """The most threads it starts (None: as many as calls in flight)."""
        return self._limit

    @limit.setter
    def limit(self, value: int | None) -> None:
        if value is not None and value < 1:
            raise ValueError(f"limit must be at least 1, got {value}")
        self._limit = value

    @property
    def threads(self) -> int:
        """Threads started so far."""
        return len(self._threads)

    def _add_thread(self) -> None:
        thread = threading.Thread(
            target=_serve,
            args=(self._calls,),
            name=f"{self._name}-{self._number}-{len(self._threads) + 1}",
            daemon=True,
        )
        thread.start()
        self._threads.append(thread)

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in one of the threads, in a copy of the caller's context (its
        contextvars): its result, or what it raised."""
        if self._closed:
            raise RuntimeError("these model threads are closed")
        self.in_flight += 1
        if self.in_flight > len(self._threads) and (
            self._limit is None or len(self._threads) < self._limit
        ):
            self._add_thread()
        loop = asyncio.get_running_loop()
        inbox = self._inboxes.get(loop)
        if inbox is None:
            inbox = self._inboxes[loop] = _Inbox(loop, self)
        future = loop.create_future()
        # In the caller's context, as run_sync's pool threads: the request id, the sequence's
        # Context, the trace's span reach the model's code and its log lines.
        call = _Call(contextvars.copy_context().run, (fn, *args), future, inbox)
        task = asyncio.current_task(loop)
        by_task = self._by_task
        if task is not None:
            by_task[task] = call
        self._calls.put(call)
        try:
            return await future
        except asyncio.CancelledError:
            if call.withdrawn:
                raise
            try:
                call.token.pop()
            except IndexError:  # a thread has it: it runs, whatever we do
                if not call.reported and call.on_end is None:  # we wait (unless detached)
                    ended = call.ended = loop.create_future()
                    await ended  # a second cancellation lets the caller go (a shutdown's cut)
            else:  # it never runs: it holds no thread
                self._skipped(call)
            raise
        finally:
            if task is not None:
                del by_task[task]
            # What it raised holds this frame (its traceback), and the future holds what it
            # raised: no cycle through them (it would live until a full garbage collection).
            call = future = None  # type: ignore[assignment]

    def started(self, task: asyncio.Task[Any]) -> float | None:
        """Since when (``time.monotonic()``) the call ``task`` waits for runs in a thread; None
        if it has not started yet, or has returned, or ``task`` waits for no call."""
        call = self._by_task.get(task)
        if call is None or not call.started or call.reported:
            return None
        return call.started_at

    def withdraw(self, task: asyncio.Task[Any]) -> bool:
        """Make sure the call of ``task`` never runs: True if it had not started (it never will;
        cancel ``task`` and it goes at once), or ``task`` waits for no call here (has not made
        it yet). False if a thread has it: it runs on."""
        call = self._by_task.get(task)
        if call is None:
            return True
        try:
            call.token.pop()
        except IndexError:
            return False
        call.withdrawn = True
        self._skipped(call)
        return True

    def _skipped(self, call: _Call) -> None:
        if call.counted:
            call.counted = False
            self.in_flight -= 1

    def detach(self, task: asyncio.Task[Any], on_end: Callable[[], None]) -> bool:
        """The call ``task`` waits for, running past its caller's deadline: when ``task`` is
        cancelled it goes at once, and ``on_end`` is called (on the loop) when the call really
        returns. False, and nothing changed, if it is not running (not started, or returned)."""
        call = self._by_task.get(task)
        if call is None or not call.started or call.reported:
            return False
        call.on_end = on_end
        return True

    async def close(self) -> None:
        """Refuse new calls; each thread stops once the calls queued before have run. Returns
        at once: a call still running is not waited for (a shutdown does not wait for sync code
        past its grace, and the threads are daemons: they do not hold up the exit)."""
        if self._closed:
            return
        self._closed = True
        _stop(self._calls, self._threads)


def _stop(calls: queue.SimpleQueue[_Call | None], threads: list[threading.Thread]) -> None:
    for _ in threads:
        calls.put(_STOP)
    threads.clear()
