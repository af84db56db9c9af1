"""What a graceful shutdown does to calls in flight, timed: ``podium serve`` of one async model
that sleeps as long as each request asks, ``--shutdown-delay`` and ``--graceful-timeout`` as
given; ``--short`` requests of 1 s and ``--long`` requests of 60 s in flight over OIP REST, then
``SIGTERM``. Reports when readiness turned false, when new connections were refused, what the
calls got (answered 200, or cut with 503), when the process exited and its exit status.

    .venv/bin/python bench/shutdown.py [--delay 2] [--grace 3] [--short 32] [--long 32]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent

MODEL = """import asyncio


class Model:
    async def predict(self, inputs):
        await asyncio.sleep(float(inputs["seconds"]))
        return {"slept": inputs["seconds"]}
"""


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except OSError:
        return True
    return False


async def run(args: argparse.Namespace) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "sleepy"
        model.mkdir()
        (model / "model.py").write_text(MODEL)
        (model / "config.yaml").write_text("predict_concurrency: 1000\n")
        http, *others = (_port() for _ in range(5))
        argv = [sys.executable, "-m", "podium", "serve", str(model), "--host", "127.0.0.1"]
        argv += ["--http-port", str(http), "--grpc-port", str(others[0])]
        argv += ["--management-port", str(others[1]), "--grpc-management-port", str(others[2])]
        argv += ["--metrics-port", str(others[3]), "--no-access-log"]
        argv += ["--shutdown-delay", str(args.delay), "--graceful-timeout", str(args.grace)]
        env = {**os.environ, "HOME": tmp, "PYTHONPATH": str(ROOT / "src")}  # this checkout's
        server = subprocess.Popen(argv, cwd=tmp, env=env)  # noqa: ASYNC220 - before any load
        url = f"http://127.0.0.1:{http}"
        try:
            async with httpx.AsyncClient(base_url=url, timeout=120) as client:
                for _ in range(600):
                    if server.poll() is not None:
                        raise SystemExit(f"podium serve exited with {server.returncode}")
                    try:
                        if (await client.get("/v2/health/ready")).status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    await asyncio.sleep(0.1)

                async def call(seconds: float) -> int:
                    body = {"seconds": seconds}
                    return (await client.post("/v1/models/sleepy:predict", json=body)).status_code

                calls = [asyncio.create_task(call(1.0)) for _ in range(args.short)]
                calls += [asyncio.create_task(call(60.0)) for _ in range(args.long)]
                await asyncio.sleep(0.5)  # all of them in flight
                start = time.monotonic()
                server.send_signal(signal.SIGTERM)
                async with httpx.AsyncClient(base_url=url, timeout=5) as probe:
                    while (await probe.get("/v2/health/ready")).status_code != 503:  # noqa: ASYNC110
                        await asyncio.sleep(0.005)
                not_ready = time.monotonic() - start
                while not _refused(http):  # noqa: ASYNC110 - another process's socket
                    await asyncio.sleep(0.02)
                refused = time.monotonic() - start
                short = Counter(await asyncio.gather(*calls[: args.short]))
                long_ = Counter(await asyncio.gather(*calls[args.short :]))
            status = await asyncio.to_thread(server.wait, 120)
            exited = time.monotonic() - start
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
    return {
        "not ready after": f"{not_ready * 1000:.0f} ms",
        "new connections refused after": f"{refused:.2f} s (--shutdown-delay {args.delay:g})",
        f"{args.short} calls of 1 s": dict(short),
        f"{args.long} calls of 60 s": dict(long_),
        "process exited after": f"{exited:.2f} s (delay + --graceful-timeout {args.grace:g})",
        "exit status": status,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delay", type=float, default=2.0, help="--shutdown-delay [2]")
    parser.add_argument("--grace", type=float, default=3.0, help="--graceful-timeout [3]")
    parser.add_argument("--short", type=int, default=32, help="calls of 1 s [32]")
    parser.add_argument("--long", type=int, default=32, help="calls of 60 s [32]")
    args = parser.parse_args()
    report = asyncio.run(run(args))
    print("| what | measured |\n|---|---|")
    for key, value in report.items():
        print(f"| {key} | {value} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
