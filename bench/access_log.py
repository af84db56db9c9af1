"""What an access line costs the event loop's thread, with the access log's own thread (the
figures from before it, lines made and written on the loop's thread, are in bench/RESULTS.md).

    .venv/bin/python bench/access_log.py [--lines N] [--rounds R] [--turn K] [--format text|json]

Logging is set up as ``podium serve`` sets it up, writing to /dev/null. Each round ends ``--lines``
requests (an ``Access`` each, with the HTTP middleware's route description left to the line,
as under load), ``--turn`` per turn of the event loop, then flushes. The figures are CPU time
(``time.thread_time``) of the loop's thread per line, and of the whole process per line
(``time.process_time``: the log's thread included), medians over ``--rounds``. On a machine
shared with other work the process figure moves with it; the loop's thread's figure is what a
request pays on the path.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from podium.logs import configure  # noqa: E402
from podium.server._access import Access, AccessLog  # noqa: E402


def describe(access: Access) -> None:
    access.describe = None
    access.method, access.path = "POST", "/v2/models/echo/infer"
    access.route, access.protocol, access.peer = "modelInfer", "oip_rest", "127.0.0.1:50000"


async def round_(log: AccessLog, lines: int, turn: int) -> tuple[float, float]:
    loop_start, all_start = time.thread_time(), time.process_time()
    n = 0
    while n < lines:
        for _ in range(turn):
            access = Access(f"id-{n}", False, time.perf_counter_ns())
            access.status, access.model = 200, "echo"
            access.describe = describe
            access.ended()
            log.write(access)
            n += 1
        await asyncio.sleep(0)  # the turn ends: its lines are handed over
    loop_used = time.thread_time() - loop_start
    log.flush()
    return loop_used / lines * 1e6, (time.process_time() - all_start) / lines * 1e6


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--turn", type=int, default=64)
    parser.add_argument("--format", choices=("text", "json"), default="text")
    args = parser.parse_args()
    devnull = open(os.devnull, "w")  # noqa: SIM115 - for the whole run
    logging.getLogger().handlers.clear()
    configure("INFO", args.format, stream=devnull)
    print(f"| access log ({args.format}) | loop thread µs/line | process µs/line |")
    print("|---|---:|---:|")
    log = AccessLog()
    figures = [asyncio.run(round_(log, args.lines, args.turn)) for _ in range(args.rounds)]
    log.close()
    loop_us = statistics.median(f[0] for f in figures)
    all_us = statistics.median(f[1] for f in figures)
    print(f"| own thread | {loop_us:.2f} | {all_us:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
