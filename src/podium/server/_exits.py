"""How ``podium serve`` ends its process: the tasks and threads that model code leaves behind
after a shutdown get :data:`LEFTOVER_GRACE` to end, and then the process exits without them
(rather than hanging where asyncio or the interpreter would wait for them for ever)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import threading
import time
from typing import Any

__all__ = ["LEFTOVER_GRACE", "exit_now", "leftovers_end", "run_loop", "stuck_threads"]


#: Seconds the tasks and threads left after a shutdown get to end before the process exits
#: without them.
LEFTOVER_GRACE = 1.0


async def leftovers_end() -> bool:
    """Cancel the tasks still running (there should be none); whether they all ended within
    LEFTOVER_GRACE (a model's coroutine may swallow its cancellation: then the process exits
    without waiting for it, rather than hanging where asyncio waits for every task)."""
    tasks = asyncio.all_tasks() - {asyncio.current_task()}
    for task in tasks:
        task.cancel()
    if not tasks:
        return True
    _, pending = await asyncio.wait(tasks, timeout=LEFTOVER_GRACE)
    return not pending


def stuck_threads() -> list[str]:
    """The threads still alive after LEFTOVER_GRACE (sync model code that never returns):
    the interpreter would wait for them forever at exit."""
    deadline = time.monotonic() + LEFTOVER_GRACE
    alive = []
    for thread in threading.enumerate():
        if thread is threading.main_thread() or thread.daemon:
            continue
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            alive.append(thread.name)
    return alive


def exit_now(code: int, why: str, *, shut_logging: bool = True) -> None:
    """Exit with ``code`` without waiting for what is left (``why``), the standard streams
    flushed. ``shut_logging``: flush and close logging's handlers first (``logging.shutdown``);
    a forced stop passes False, as that waits for each handler's lock, which a thread that is
    stuck may hold, and nothing may hold up a forced exit."""
    with contextlib.suppress(Exception):
        logging.getLogger("podium").warning("exiting without waiting: %s", why)
    if shut_logging:
        logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def run_loop(coro: Any) -> int:
    try:
        import uvloop
    except ImportError:  # uvloop is optional (not on Windows)
        return asyncio.run(coro)
    return uvloop.run(coro)
