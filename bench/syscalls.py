"""System calls of one kind per request of a whole ``podium serve`` process, this tree against
another one, counted by ``strace``: the kernel's side, which callgrind's instruction counts
(bench/instructions.py) do not see.

    .venv/bin/python bench/syscalls.py --other /path/to/other/src
    .venv/bin/python bench/syscalls.py --other ... --model bench/models/batch_busy_sync \
        --path /v2/models/batch_busy_sync/infer --connections 64 --requests 4000

Each tree's server runs on loopback ports serving ``--model``; ``--connections`` keep-alive
clients in this process (bench/instructions.py's) send 500 requests to warm up, then
``strace -f -c -e trace=SYSCALL`` attaches to every thread of the server, the clients send
``--requests`` requests, and strace detaches and reports how many calls it saw. Per request:
that count / ``--requests`` (what the idle server makes meanwhile is included: a second's worth
at most). CPython 3.11 asks the kernel for the pid (``getpid``) in every
``asyncio.get_running_loop()``, and in what calls it (``asyncio.current_task()`` without a loop,
``loop.create_task``'s callers, ``asyncio.Event.wait``...): the default ``--syscall``.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from instructions import (
    BODY,
    ROOT,
    _free_port,
    _podium_argv,
    _read_response,
    _request,
    _send_concurrently,
    stop,
)


def _count(
    src: Path, model: Path, path: str, body: bytes, syscall: str, requests: int, connections: int
) -> int:
    """The ``syscall`` calls the server made while it answered ``requests`` requests."""
    ports = [_free_port() for _ in range(5)]
    message = _request(path, body)
    env = {**os.environ, "PYTHONPATH": str(src)}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "strace.txt"
        server = subprocess.Popen(
            _podium_argv(model, ports),
            cwd=tmp,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    with socket.create_connection(("127.0.0.1", ports[0]), timeout=10) as sock:
                        sock.sendall(message)
                        if _read_response(sock, bytearray())[0] == 200:
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError(f"the server did not answer {path} with 200")
                time.sleep(0.2)
            _send_concurrently(ports[0], message, connections, 500, path)  # warm-up
            tracer = subprocess.Popen(
                ["strace", "-f", "-c", "-e", f"trace={syscall}", "-o", str(out)]
                + ["-p", str(server.pid)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(1)  # attached to every thread
            _send_concurrently(ports[0], message, connections, requests, path)
            tracer.send_signal(signal.SIGINT)
            tracer.wait(timeout=60)
        finally:
            stop(server, 60)
        found = re.search(
            rf"(?m)^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?{syscall}$", out.read_text()
        )
        return int(found.group(1)) if found else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--other", type=Path, help="the other tree's src/")
    parser.add_argument("--model", type=Path, default=ROOT / "examples" / "echo")
    parser.add_argument("--path", default="/v2/models/echo/infer")
    parser.add_argument("--body", default=BODY)
    parser.add_argument("--syscall", default="getpid")
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--connections", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    trees = [("this", ROOT / "src")] + ([("other", args.other)] if args.other else [])
    for round_ in range(1, args.repeat + 1):
        for label, src in trees:
            calls = _count(
                src,
                args.model.resolve(),
                args.path,
                args.body.encode(),
                args.syscall,
                args.requests,
                args.connections,
            )
            print(
                f"round {round_}, {label} ({src}): {calls:,} {args.syscall} for {args.requests:,}"
                f" requests: {calls / args.requests:.3f} per request",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
