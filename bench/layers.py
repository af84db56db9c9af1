"""What each layer of Podium's plain HTTP path costs, in process: no sockets, no HTTP server.

    .venv/bin/python bench/layers.py [--base-src OTHER/src] [--requests N] [--rounds R]

The Truss route (`POST /v1/models/truss_echo:predict`, an async echo of the JSON body) is called
through the same objects `podium serve` builds, one layer more each time:

1. the data plane's `infer` (the route's model found once, as the HTTP app finds it);
2. the HTTP app (routing, the body, JSON in and out, the response's ASGI messages);
3. the access middleware with the access log off (request id, the current request);
4. the same with the access log on (its line made and written to /dev/null through Podium's
   log writer, as `podium serve` sets up logging);
5. uvicorn's proxy-headers middleware around it, as `podium serve` runs it;
6. the same with CORS and gzip on (`--cors-allow-origins '*' --gzip`, server/http/_web.py) and a
   request that sends an `Origin` and `Accept-Encoding: gzip` (the echo's answer is under
   gzip's minimum size: what the wrappers cost, not what compressing costs). Off, as by
   default, they are not in the stack at all (layers 3-5 are built as `podium serve` builds
   them, with the default settings).

The garbage collector is set up as each tree's server sets it up once started. `receive` and
`send` are plain coroutines that do nothing; a turn of the event loop ends every
64 requests (the access lines of a turn are made at its end, as under load). Each layer runs
`--requests` times per round; the figure is the median over `--rounds`, in µs per request, with
the cost of making the scope subtracted. Everything runs in one process pinned to one CPU, so
the figures hold still on a loaded machine, unlike a server's timings: they say where the
Python time of a request goes, not what a client sees (bench/run.py --plain measures that).
`--base-src` runs the same in a second process from other sources, for a before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
MODEL = BENCH / "models" / "truss_echo"
BODY = b'{"inputs":[{"name":"input-0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}'
LAYERS = (
    "data plane infer",
    "+ HTTP app",
    "+ access middleware, log off",
    "+ access middleware, log on",
    "+ uvicorn proxy headers",
    "+ CORS and gzip on",
)


async def _measure(requests: int, rounds: int) -> dict[str, float]:
    import uvloop  # noqa: F401  (the server's loop; imported here so --help needs none of this)
    from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

    from podium.dataplane import DataPlane
    from podium.server._access import AccessLog, RequestIds
    from podium.server._limits import LOST_HOOK, LostHook
    from podium.server.http import INFERENCE_ROUTES, AccessMiddleware, HttpApp
    from podium.types import Call, WireProtocol

    try:  # as podium serve builds the stack (before server/http/_web.py: nothing to put on)
        from podium.config import Web
        from podium.server.http import with_web
    except ImportError:
        Web, with_web = None, None  # type: ignore[assignment,misc]

    plane = DataPlane(executor=ThreadPoolExecutor(2))
    plane.repository.add_paths([MODEL])
    await plane.repository.load_all()
    app = HttpApp(plane)
    version = plane.resolve("truss_echo", None)
    try:  # the garbage collector as each tree's server sets it up once started
        from podium import heap

        heap.settle()
    except ImportError:  # (before podium/heap.py: frozen, the default thresholds)
        gc.collect()
        gc.freeze()

    def scope(*extra: tuple[bytes, bytes]) -> dict[str, Any]:
        return {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "server": ("127.0.0.1", 8080),
            "client": ("127.0.0.1", 50000),
            "scheme": "http",
            "method": "POST",
            "root_path": "",
            "path": "/v1/models/truss_echo:predict",
            "raw_path": b"/v1/models/truss_echo:predict",
            "query_string": b"",
            "headers": [
                (b"host", b"127.0.0.1:8080"),
                (b"content-type", b"application/json"),
                (b"content-length", b"%d" % len(BODY)),
                *extra,
            ],
            LOST_HOOK: LostHook(),
        }

    message = {"type": "http.request", "body": BODY, "more_body": False}

    async def receive() -> dict[str, Any]:
        return message

    async def send(_: Any) -> None:
        pass

    async def plane_only(_scope: Any, _receive: Any, _send: Any) -> None:
        call = Call("truss_echo", None, WireProtocol.TRUSS, None, None)
        call.payload = {"a": 1}
        await plane.infer(call, version)

    def middleware(log_on: bool, web: Any = None) -> AccessMiddleware:
        inner: Any = app
        if with_web is not None:
            inner = with_web(app, Web() if web is None else web)
        return AccessMiddleware(
            inner, log=AccessLog(log_on), ids=RequestIds(), routes=INFERENCE_ROUTES
        )

    stacks: dict[str, Any] = {
        LAYERS[0]: plane_only,
        LAYERS[1]: app,
        LAYERS[2]: middleware(False),
        LAYERS[3]: middleware(True),
        LAYERS[4]: ProxyHeadersMiddleware(middleware(True), trusted_hosts="127.0.0.1"),
    }
    if with_web is not None:
        on = Web(allow_origins=("*",), gzip=True)
        stacks[LAYERS[5]] = ProxyHeadersMiddleware(middleware(True, on), trusted_hosts="127.0.0.1")
    asked = ((b"origin", b"https://app.example"), (b"accept-encoding", b"gzip, deflate"))
    per_round: dict[str, list[float]] = {name: [] for name in stacks}
    making: list[float] = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(requests):
            scope()
        making.append((time.perf_counter() - start) / requests * 1e6)
        for name, stack in stacks.items():
            start = time.perf_counter()
            extra = asked if name == LAYERS[5] else ()
            for n in range(requests):
                await stack(scope(*extra), receive, send)
                if n % 64 == 63:
                    await asyncio.sleep(0)  # a turn ends: its access lines are made
            per_round[name].append((time.perf_counter() - start) / requests * 1e6)
    made = statistics.median(making)
    await plane.repository.close()
    return {name: statistics.median(times) - made for name, times in per_round.items()}


def _child(requests: int, rounds: int) -> None:
    import uvloop

    from podium import logs

    logs.configure("INFO", stream=open(os.devnull, "w"))  # noqa: SIM115 (the process's life)

    figures = uvloop.run(_measure(requests, rounds))
    print(json.dumps(figures))


def _run(src: Path, requests: int, rounds: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    cmd = ["taskset", "-c", "1"] if _has_taskset() else []
    cmd += [sys.executable, __file__, "--child", str(requests), str(rounds)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the measuring process from {src} failed:\n{done.stderr[-3000:]}")
    return {k: float(v) for k, v in json.loads(done.stdout.strip().splitlines()[-1]).items()}


def _has_taskset() -> bool:
    return any((Path(p) / "taskset").exists() for p in os.environ.get("PATH", "").split(":"))


def main(argv: list[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in[:1] == ["--child"]:
        _child(int(args_in[1]), int(args_in[2]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base-src", type=Path, default=None, help="another tree's src/")
    parser.add_argument("--requests", type=int, default=20_000, help="per layer and round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(args_in)
    if min(args.requests, args.rounds) < 1:
        parser.error("--requests and --rounds must be at least 1")
    this = _run(BENCH.parent / "src", args.requests, args.rounds)
    base = _run(args.base_src.resolve(), args.requests, args.rounds) if args.base_src else None
    print("### The plain path's layers, in process (Truss route, async echo)\n")
    print(f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"- command: `python bench/layers.py {' '.join(args_in)}`")
    print(f"- {args.requests} requests per layer and round, median of {args.rounds} rounds\n")
    head = "| layers | µs per request | added by the layer |"
    rule = "|---|---:|---:|"
    if base is not None:
        head += " base µs per request | base, added |"
        rule += "---:|---:|"
    print(head)
    print(rule)
    before = before_base = 0.0
    for index, name in enumerate(LAYERS):
        # the last layer adds to the one before the previous: both put something on layer 5's
        if name not in this:
            continue
        after = LAYERS[4] if index == 5 else None
        row = (
            f"| {name} | {this[name]:.2f} | {this[name] - (this[after] if after else before):.2f} |"
        )
        before = this[name] if after is None else before
        if base is not None:
            if name in base:
                added = base[name] - (base[after] if after else before_base)
                row += f" {base[name]:.2f} | {added:.2f} |"
                before_base = base[name] if after is None else before_base
            else:
                row += " n/a | n/a |"
        print(row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
