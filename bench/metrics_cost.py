"""What Podium's request counters cost: the OIP REST echo request through the HTTP app, in
process (no sockets), with this tree's Podium and with another one (a checkout before metrics).

    .venv/bin/python bench/metrics_cost.py --other /path/to/old/src          # µs per request
    .venv/bin/python bench/metrics_cost.py --other /path/to/old/src --instructions

Timing: each tree in turn, pinned to CPU 0, the best of ``--rounds`` rounds of ``--calls``
requests (the app answers into a no-op ``send``). ``--instructions`` counts user-space
instructions per request with valgrind's callgrind instead: (instructions after N2 requests −
after N1) / (N2 − N1), exact and unmoved by other load on the machine, which timings are not.
The end-to-end figure (req/s of a server under wrk) is ``bench/run.py``'s.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BODY = b'{"inputs":[{"name":"input-0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}'


async def _serve_in_process(calls: int, rounds: int) -> float:
    """The best seconds per request of ``rounds`` rounds of ``calls`` requests."""
    from concurrent.futures import ThreadPoolExecutor

    from podium.dataplane import DataPlane
    from podium.server.http import HttpApp

    executor = ThreadPoolExecutor(4)
    plane = DataPlane(executor=executor)
    plane.repository.add_paths([ROOT / "examples" / "echo"])
    await plane.repository.load_all()
    app = HttpApp(plane)
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v2/models/echo/infer",
        "headers": [(b"content-type", b"application/json"), (b"content-length", b"80")],
        "query_string": b"",
        "http_version": "1.1",
        "scheme": "http",
        "server": ("127.0.0.1", 80),
        "client": ("127.0.0.1", 1),
        "root_path": "",
    }
    message = {"type": "http.request", "body": BODY, "more_body": False}

    async def receive() -> dict[str, object]:
        return message

    async def send(_: object) -> None:
        return None

    gc.collect()
    gc.freeze()
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            await app(scope, receive, send)
        best = min(best, (time.perf_counter() - start) / calls)
    await plane.close()
    executor.shutdown()
    return best


def _child(calls: int, rounds: int) -> None:
    print(asyncio.run(_serve_in_process(calls, rounds)))


def _run(src: str, calls: int, rounds: int, valgrind: bool = False) -> str:
    env = {**os.environ, "PYTHONPATH": src, "OPENBLAS_NUM_THREADS": "1"}
    cmd = [sys.executable, __file__, "--child", str(calls), str(rounds)]
    if valgrind:
        cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *cmd]
    else:
        cmd = ["taskset", "-c", "0", *cmd]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    if valgrind:
        found = re.search(r"Collected : (\d+)", done.stderr)
        assert found, done.stderr[-2000:]
        return found[1]
    return done.stdout.strip().splitlines()[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--other", help="the src/ of the Podium to compare with (required)")
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3, help="alternations of the two trees")
    parser.add_argument("--instructions", action="store_true", help="count with callgrind")
    parser.add_argument("--child", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(*args.child)
        return
    if not args.other:
        parser.error("--other SRC is required")
    trees = {"this tree": str(ROOT / "src"), "other": args.other}
    for _ in range(args.repeat):
        for name, src in trees.items():
            if args.instructions:
                low, high = 1, 1 + args.calls // 10
                a = int(_run(src, low, 1, valgrind=True))
                b = int(_run(src, high, 1, valgrind=True))
                print(f"{name}: {(b - a) / (high - low):,.0f} instructions per request")
            else:
                seconds = float(_run(src, args.calls, args.rounds))
                print(f"{name}: {seconds * 1e6:.2f} µs per request (best of {args.rounds})")


if __name__ == "__main__":
    main()
