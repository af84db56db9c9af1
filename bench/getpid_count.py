"""getpid system calls per request of a running server: `podium serve examples/echo` (or, with
--guarded, the raw ASGI echo on Podium's guarded protocol, bench/guarded_echo.py) under OIP
REST echo requests from one keep-alive client on 127.0.0.1.

On CPython 3.11, ``asyncio.get_running_loop()`` (and what calls it: ``current_task()`` without
a loop, ``asyncio.Event.wait`` that has to wait, ...) checks ``getpid()`` on every call: kernel
time that callgrind does not count but server CPU does. The server is started, warmed up, then
``strace -f -c -e trace=getpid -p PID`` is attached to all its threads for ``--requests``
requests (and the two seconds it is given to attach), and its count is printed per request.

    python bench/getpid_count.py --src src --requests 2000
    python bench/getpid_count.py --src /tmp/BASE/src --requests 2000 --guarded
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BODY = json.dumps(
    {"inputs": [{"name": "input-0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _argv(guarded: bool, ports: list[int]) -> tuple[list[str], str]:
    if guarded:
        return [
            sys.executable,
            str(ROOT / "bench" / "guarded_echo.py"),
            "--port",
            str(ports[0]),
        ], "/"
    flags = ("--http-port", "--grpc-port", "--management-port", "--grpc-management-port")
    argv = [sys.executable, "-m", "podium", "serve", str(ROOT / "examples" / "echo")]
    argv += ["--host", "127.0.0.1"]
    for flag, port in zip((*flags, "--metrics-port"), ports, strict=True):
        argv += [flag, str(port)]
    return argv, "/v2/models/echo/infer"


def _connect(port: int, within: float) -> http.client.HTTPConnection:
    """A connection to the server once it answers ready (the raw echo answers 200 to all)."""
    deadline = time.monotonic() + within
    while True:
        try:
            client = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            client.request("GET", "/v2/health/ready")
            answer = client.getresponse()
            answer.read()
            if answer.status == 200:
                return client
            client.close()
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"the server was not ready within {within} s")
        time.sleep(0.2)


def count(src: Path, requests: int, guarded: bool) -> int:
    """getpid calls of the server's process while it answers ``requests`` requests."""
    ports = [_free_port() for _ in range(5)]
    argv, path = _argv(guarded, ports)
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "PYTHONPATH": str(src), "PYTHONHASHSEED": "0", "HOME": home}
        out = Path(home) / "strace.txt"
        server = subprocess.Popen(
            argv, env=env, cwd=home, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            client = _connect(ports[0], 120)

            def one() -> None:
                client.request("POST", path, BODY, {"content-type": "application/json"})
                answer = client.getresponse()
                answer.read()
                if answer.status != 200:
                    raise RuntimeError(f"the server answered {answer.status}")

            for _ in range(300):  # warm-up
                one()
            trace = ["strace", "-f", "-c", "-e", "trace=getpid", "-p", str(server.pid)]
            tracer = subprocess.Popen([*trace, "-o", str(out)], stderr=subprocess.DEVNULL)
            time.sleep(2)  # attached to every thread
            for _ in range(requests):
                one()
            tracer.send_signal(signal.SIGINT)  # detach, write the summary
            tracer.wait(30)
            for line in out.read_text().splitlines():
                parts = line.split()
                if parts and parts[-1] == "getpid":
                    return int(parts[3] if len(parts) >= 6 else parts[-2])
            return 0
        finally:
            server.terminate()
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", type=Path, default=ROOT / "src", help="the tree's src/")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--guarded", action="store_true", help="the raw echo, guarded protocol")
    args = parser.parse_args()
    calls = count(args.src.resolve(), args.requests, args.guarded)
    print(f"{args.src}: {calls} getpid in {args.requests} requests: {calls / args.requests:.3f}")


if __name__ == "__main__":
    main()
