"""The operating system's scheduling policy for Podium's hand-off threads: Linux's ``SCHED_BATCH``.

A request that crosses threads wakes a thread that can do nothing without the GIL: a sync
``predict`` handed to a model thread, a gRPC call passed from grpc's I/O threads to the relay's
serving thread, the event loop and the sender. The thread that wakes it, usually the event
loop, holds the GIL. Under the default policy (``SCHED_OTHER``) Linux lets a woken thread
preempt the running one on the same CPU at once, only to find the GIL taken and sleep again. The
loop, interrupted, pays two thread switches and the GIL's hand-over for nothing, on every call.

``SCHED_BATCH`` (sched(7)) is the same fair policy without that wake-up preemption. A woken
thread waits until the running one blocks (the loop's poll, which lets go of the GIL) or its time
slice ends. It then finds the GIL free and often several calls waiting, which it runs without
sleeping in between. It keeps the thread's nice value and its fair share of the CPU. On
a machine with an idle CPU nothing changes, since a woken thread is placed there and runs at
once. Only where the CPUs are all busy does a woken thread wait for a slice boundary instead of
cutting in.

It is on by default (``--sched-batch``, ``--no-sched-batch`` to leave every thread alone) and
applies only to threads Podium hands calls to: the model threads, the gRPC bridge's threads and
grpc's own I/O threads. The event loop's thread keeps the default policy, and so does the access
log's writer: it wakes on its own clock to write many lines at once, and made to wait for a
busy loop it took the GIL in longer runs, which lengthened the requests' tail (bench/RESULTS.md
§61). A new thread takes its creator's: those a model starts while it loads or predicts (a
framework's compute pool) run under ``SCHED_BATCH`` too, the policy meant for such threads; those
started from the loop do not. The choice reaches worker processes through :data:`ENV`.
Elsewhere than Linux (no ``SCHED_BATCH``) every function here does nothing.
"""

from __future__ import annotations

import os
import threading

__all__ = [
    "ENV",
    "GRPC_THREADS",
    "batch_named_threads",
    "batch_this_thread",
    "configure",
    "enabled",
]

#: ``0``: off; anything else, or unset: on. Set by :func:`configure` for worker processes.
ENV = "PODIUM_SCHED_BATCH"

#: The OS names of grpc's own I/O threads (its EventEngine's pool, and the lifeguard thread that
#: starts more of them): they poll the sockets and wake the relay's serving thread.
GRPC_THREADS = ("event_engine", "lifeguard")

_POLICY: int | None = getattr(os, "SCHED_BATCH", None)
_enabled = os.environ.get(ENV, "1") != "0"
#: threads of this process :func:`batch_named_threads` is done with (by native id), moved or not
_seen: set[int] = set()
#: those it has looked at once and found under another name: it looks again next time
_once: set[int] = set()
_lock = threading.Lock()


def configure(on: bool) -> None:
    """Turn the policy on or off for threads started from now on, in this process and in worker
    processes it starts later (through :data:`ENV`)."""
    global _enabled
    _enabled = on
    os.environ[ENV] = "1" if on else "0"


def enabled() -> bool:
    """Whether hand-off threads get ``SCHED_BATCH`` here (configured on, and the OS has it)."""
    return _enabled and _POLICY is not None


def _set(tid: int) -> bool:
    assert _POLICY is not None
    try:
        os.sched_setscheduler(tid, _POLICY, os.sched_param(0))
    except OSError:  # not allowed here (a seccomp filter, an odd kernel): left as it is
        return False
    return True


def batch_this_thread() -> bool:
    """At the start of a hand-off thread: put the calling thread under ``SCHED_BATCH``. True if
    it now is; False if the policy is off or cannot be set (the thread is left as it was)."""
    if not enabled():
        return False
    return _set(0)  # 0: the calling thread (Linux schedules threads, not processes)


def batch_named_threads(prefixes: tuple[str, ...]) -> int:
    """Put this process's threads whose OS names start with one of ``prefixes`` under
    ``SCHED_BATCH``: threads a library starts and names, which Podium cannot reach at their
    start (grpc's ``event_engine`` threads). Returns how many were moved this time. Threads they
    start later take their policy from them.

    Each thread's name is read at most twice: a new thread bears its creator's name until it
    names itself, so one caught in between (grpc starts its threads as the server starts, when
    the first call runs) is looked at again on the next call. A call that finds no new thread
    costs one directory listing."""
    global _seen, _once
    if not enabled():
        return 0
    try:
        tids = {int(entry) for entry in os.listdir("/proc/self/task")}
    except OSError:
        return 0
    moved = 0
    with _lock:
        settled, once = set(), set()
        for tid in tids - _seen:
            try:
                with open(f"/proc/self/task/{tid}/comm", encoding="utf-8") as file:
                    name = file.read()
            except OSError:  # it has just ended
                continue
            if name.startswith(prefixes):
                moved += _set(tid)
                settled.add(tid)
            elif tid in _once:
                settled.add(tid)
            else:
                once.add(tid)
        # those that ended are forgotten: a new thread may get an old id
        _seen, _once = (_seen & tids) | settled, once
    return moved
