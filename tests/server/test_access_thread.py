"""The access log's own thread (podium.server._access_thread.LineThread, AccessLog's default
as ``podium serve`` configures logging): lines are made off the event loop, a full queue drops
and counts lines instead of blocking a request, and every line is written at shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import run_server
from prometheus_client import CollectorRegistry, generate_latest

from podium.dataplane import DataPlane
from podium.logs import configure
from podium.server._access import Access, AccessLog
from podium.server._access_thread import INTERVAL, MAX_QUEUED_LINES, LineThread
from podium.server._metrics import PodiumCollector

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@contextlib.contextmanager
def podium_logging() -> Iterator[io.StringIO]:
    """Logging as ``podium serve`` configures it, into a string; restored afterwards (inside
    the test: pytest adds its own handlers once the test is called)."""
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    stream = io.StringIO()
    root.handlers.clear()
    configure("INFO", "text", stream=stream)
    try:
        yield stream
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)


def ended(n: int, made_on: list[str] | None = None) -> Access:
    access = Access(f"r-{n}", True, time.perf_counter_ns())
    access.status = 200
    if made_on is not None:
        access.describe = lambda a: made_on.append(threading.current_thread().name)
    access.ended()
    return access


def test_the_default_queue_is_bounded() -> None:
    assert LineThread(lambda batch: None).limit == MAX_QUEUED_LINES == 10_000


def test_the_thread_writes_an_interval_of_lines_at_once() -> None:
    """The thread wakes every 10 ms (not 50): it holds the GIL for at most an interval's lines,
    which under load made the requests of that moment wait (the p99; bench/RESULTS.md §70)."""
    assert LineThread(lambda batch: None).interval == INTERVAL == 0.01
    with pytest.raises(ValueError, match="at least one line"):
        LineThread(lambda batch: None, 0)


def test_lines_are_made_and_written_on_the_logs_own_thread() -> None:
    with podium_logging() as stream:
        log = AccessLog()
        made_on = lines_made(log)
    assert made_on == ["podium-access-log"] * 3
    assert [line.split(" [")[1][:3] for line in stream.getvalue().splitlines()] == [
        "r-0",
        "r-1",
        "r-2",
    ]


def lines_made(log: AccessLog) -> list[str]:
    made_on: list[str] = []

    async def main() -> None:
        for n in range(3):
            log.write(ended(n, made_on))
        await asyncio.sleep(0)  # the turn ends: handed over, not made here
        assert log.lines is not None and log.lines.flush()

    asyncio.run(main())
    log.close()
    return made_on


def test_a_full_queue_drops_and_counts_lines_and_never_blocks() -> None:
    written: list[str] = []
    release = threading.Event()
    writing = threading.Event()

    def write(batch: list[str]) -> None:
        writing.set()
        release.wait(10)
        written.extend(batch)

    lines = LineThread(write, limit=3)
    lines.put(["a"])
    assert writing.wait(5)  # the thread holds "a" (counted until written)
    lines.put(["b", "c"])
    lines.put(["d", "e"])  # no room left: dropped, at once (the writer is stuck)
    assert (lines.queued, lines.dropped) == (3, 2)
    release.set()
    assert lines.flush()
    assert written == ["a", "b", "c"] and lines.queued == 0
    lines.put(["f"])  # room again
    lines.close()
    assert written == ["a", "b", "c", "f"] and lines.dropped == 2
    lines.put(["g"])  # closed: written at once, on this thread
    assert written[-1] == "g"


def test_the_drop_count_is_a_metric() -> None:
    with podium_logging():
        log = AccessLog(max_queued=1)
        assert log.lines is not None
        stuck = threading.Event()
        log.lines._write = lambda batch: stuck.wait(10)  # a log that cannot keep up
        log.lines.put([ended(1)])
        log.lines.put([ended(2), ended(3)])
        registry = CollectorRegistry()
        registry.register(PodiumCollector(DataPlane(), access_log=log, gpus=list))
        text = generate_latest(registry).decode()
        stuck.set()
        log.close()
    assert "podium_access_log_dropped_lines_total 2.0" in text
    assert "podium_access_log_queued_lines 1.0" in text


def test_every_line_is_written_at_shutdown() -> None:
    count = 40
    with run_server(EXAMPLES / "echo") as server:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            for n in range(count):
                answer = client.post(
                    "/v2/models/echo/infer",
                    json={"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [n]}]},
                    headers={"x-request-id": f"flush-{n}"},
                )
                assert answer.status_code == 200
    # the server stopped on SIGTERM right after the last answer: its lines were all written
    lines = [line for line in server.lines if "podium.access [flush-" in line]
    assert len(lines) == count


def test_an_idle_thread_sleeps_until_lines_are_handed_over() -> None:
    """With nothing to write the thread does not wake every interval (an idle server's log
    costs nothing); the next lines wake it, and are written after one interval's gathering."""
    written: list[str] = []
    drains: list[int] = []

    class Counted(LineThread):
        def _drain(self) -> int:
            drains.append(1)
            return super()._drain()

    lines = Counted(written.extend, interval=0.005)
    lines.put(["a"])
    assert lines.flush()
    time.sleep(0.1)  # twenty intervals: an interval's wake-up would drain about twenty times
    assert len(drains) <= 3 and lines._idle
    lines.put(["b"])  # wakes it: written without a flush
    deadline = time.monotonic() + 5
    while written != ["a", "b"] and time.monotonic() < deadline:
        time.sleep(0.001)
    assert written == ["a", "b"]
    lines.close()
    assert lines._thread is not None and not lines._thread.is_alive()


def test_the_loop_hands_each_line_over_as_its_request_ends_with_no_turn_held() -> None:
    """The log's thread gathers the lines itself: the loop's thread appends each ended request
    to its queue (no buffer per turn of the loop, no callback at the turn's end)."""
    with podium_logging() as stream:
        log = AccessLog()
        assert log.lines is not None

        async def main() -> None:
            for n in range(3):
                log.write(ended(n))
            assert log.lines is not None and log.lines.queued == 3  # handed over already
            assert log._held._items == [] and log._held._handle is None  # nothing held

        asyncio.run(main())
        log.close()
    assert len(stream.getvalue().splitlines()) == 3


def test_a_queue_filling_past_half_wakes_the_thread_once() -> None:
    written: list[str] = []
    wakes: list[int] = []
    lines = LineThread(written.extend, limit=8, interval=60.0)  # (no interval's wake-up here)
    lines.add("a")  # starts the thread, which gathers for an interval
    set_ = lines._wake.set

    def counted_set() -> None:
        wakes.append(1)
        set_()

    lines._wake.set = counted_set  # type: ignore[method-assign]
    for item in "bcdefg":
        lines.add(item)
    assert len(wakes) == 1  # as the count crossed half of 8, not on each line past it
    deadline = time.monotonic() + 5
    while len(written) < 5 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert written[:5] == ["a", "b", "c", "d", "e"]  # written without a flush or an interval
    lines.close()
    assert written == list("abcdefg") and lines.dropped == 0
