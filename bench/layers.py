"""What each layer of Podium's plain HTTP path costs, in process: no sockets, no HTTP server.

    .venv/bin/python bench/layers.py [--base-src OTHER/src] [--requests N] [--rounds R]

The Truss route (`POST /v1/models/truss_echo:predict`, an async echo of the JSON body) is called
through the same objects `podium serve` builds, one layer more each time:

1. the data plane's `infer` (the route's model found once, as the HTTP app finds it);
2. the HTTP app (routing, the body, JSON in and out, the response's ASGI messages);
3. the access middleware with the access log off (request id, the current request);
4. the same with the access log on (its line made and written to /dev/null through Podium's
   log writer, as `podium serve` sets up logging);
5. uvicorn's proxy headers, as `podium serve` runs them (since §39 the access middleware reads
   `X-Forwarded-*` itself, only for a request that carries them; before, uvicorn's middleware);
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

`--route oip` measures the OIP REST route instead (`POST /v2/models/echo/infer` to
`examples/echo`, the plain path's benchmark request; its data plane layer takes the request
parsed once). `--instructions` counts instructions (valgrind's callgrind, a dump around each
layer's requests, one round) in place of timing them: a figure that load on the machine does
not move at all, per request, the scope's making and the dumps' own cost subtracted.
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
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from common import callgrind_dump, callgrind_dumps

BENCH = Path(__file__).resolve().parent
MODEL = BENCH / "models" / "truss_echo"
OIP_MODEL = BENCH.parent / "examples" / "echo"
BODY = b'{"inputs":[{"name":"input-0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}'
LAYERS = (
    "data plane infer",
    "+ HTTP app",
    "+ access middleware, log off",
    "+ access middleware, log on",
    "+ uvicorn proxy headers",
    "+ CORS and gzip on",
)


async def _measure(requests: int, rounds: int, route: str, counting: bool) -> dict[str, float]:
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

    oip = route == "oip"
    name = "echo" if oip else "truss_echo"
    path = "/v2/models/echo/infer" if oip else "/v1/models/truss_echo:predict"
    plane = DataPlane(executor=ThreadPoolExecutor(2))
    plane.repository.add_paths([OIP_MODEL if oip else MODEL])
    await plane.repository.load_all()
    app = HttpApp(plane)
    version = plane.resolve(name, None)
    protocol = WireProtocol.OIP_REST if oip else WireProtocol.TRUSS
    if oip:
        from podium.server.http._oip import parse_request

        payload: Any = parse_request(BODY)
    else:
        payload = {"a": 1}
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
            "path": path,
            "raw_path": path.encode(),
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
        call = Call(name, None, protocol, None, None)
        call.payload = payload
        await plane.infer(call, version)

    logs: list[AccessLog] = []

    def middleware(log_on: bool, web: Any = None) -> AccessMiddleware:
        inner: Any = app
        if with_web is not None:
            inner = with_web(app, Web() if web is None else web)
        logs.append(AccessLog(log_on))
        return AccessMiddleware(inner, log=logs[-1], ids=RequestIds(), routes=INFERENCE_ROUTES)

    def proxied(stack: AccessMiddleware) -> Any:
        """``stack`` as podium serve runs it behind uvicorn's proxy headers: the access
        middleware reads them itself where it can (forwarded_from), else uvicorn's around it."""
        if hasattr(stack, "forwarded_from"):
            stack.forwarded_from("127.0.0.1")
            return stack
        return ProxyHeadersMiddleware(stack, trusted_hosts="127.0.0.1")

    stacks: dict[str, Any] = {
        LAYERS[0]: plane_only,
        LAYERS[1]: app,
        LAYERS[2]: middleware(False),
        LAYERS[3]: middleware(True),
        LAYERS[4]: proxied(middleware(True)),
    }
    if with_web is not None:
        on = Web(allow_origins=("*",), gzip=True)
        stacks[LAYERS[5]] = proxied(middleware(True, on))
    asked = ((b"origin", b"https://app.example"), (b"accept-encoding", b"gzip, deflate"))
    if counting:
        return await _count(stacks, scope, receive, send, requests, logs)
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


async def _count(
    stacks: dict[str, Any], scope: Any, receive: Any, send: Any, requests: int, logs: list[Any]
) -> dict[str, float]:
    """Under callgrind: instructions per request of each stack, less the scope's making and
    the dumps' own cost (an empty loop between two dumps). Before each dump the access logs
    are flushed (their thread has written every line), so that a stack's lines count in its
    own figure, every thread of the process counted."""
    labels: list[str] = []

    async def nothing(_scope: Any, _receive: Any, _send: Any) -> None:
        pass

    runs = {"(empty)": (nothing, 1), "(scope)": (nothing, requests)}
    runs.update({name: (stack, requests) for name, stack in stacks.items()})
    for name, (stack, count) in runs.items():
        for n in range(200 if count > 1 else 0):  # warm-up: caches, lazily built objects
            await stack(scope(), receive, send)
            if n % 64 == 63:
                await asyncio.sleep(0)
        await asyncio.sleep(0)
        for log in logs:
            log.flush()
        callgrind_dump("skip")
        for n in range(count):
            await stack(scope(), receive, send)
            if n % 64 == 63:
                await asyncio.sleep(0)  # a turn ends: its access lines are made
        await asyncio.sleep(0)
        for log in logs:
            log.flush()
        callgrind_dump(f"layer-{len(labels)}")
        labels.append(name)
    return {"labels": labels, "requests": requests}  # type: ignore[dict-item]


def _child(requests: int, rounds: int, route: str = "truss", counting: bool = False) -> None:
    import uvloop

    from podium import logs

    logs.configure("INFO", stream=open(os.devnull, "w"))  # noqa: SIM115 (the process's life)

    figures = uvloop.run(_measure(requests, rounds, route, counting))
    print(json.dumps(figures))


def _run(src: Path, requests: int, rounds: int, route: str, counting: bool) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    cmd = ["taskset", "-c", "1"] if _has_taskset() and not counting else []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        if counting:
            cmd += ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
        cmd += [sys.executable, __file__, "--child", str(requests), str(rounds), route]
        cmd += ["count"] if counting else []
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"the measuring process from {src} failed:\n{done.stderr[-3000:]}")
        figures = json.loads(done.stdout.strip().splitlines()[-1])
        if not counting:
            return {k: float(v) for k, v in figures.items()}
        totals = callgrind_dumps(out)
    labels, n = figures["labels"], figures["requests"]
    counts = {label: totals[f"layer-{i}"] for i, label in enumerate(labels)}
    fixed = counts.pop("(empty)")  # the dumps' and the loop's ends
    scope = (counts.pop("(scope)") - fixed) / n
    return {label: (total - fixed) / n - scope for label, total in counts.items()}


def _has_taskset() -> bool:
    return any((Path(p) / "taskset").exists() for p in os.environ.get("PATH", "").split(":"))


def main(argv: list[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in[:1] == ["--child"]:
        route = args_in[3] if len(args_in) > 3 else "truss"
        _child(int(args_in[1]), int(args_in[2]), route, counting=args_in[4:5] == ["count"])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base-src", type=Path, default=None, help="another tree's src/")
    parser.add_argument("--requests", type=int, default=20_000, help="per layer and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--route", choices=("truss", "oip"), default="truss")
    parser.add_argument("--instructions", action="store_true", help="count, under callgrind")
    args = parser.parse_args(args_in)
    if min(args.requests, args.rounds) < 1:
        parser.error("--requests and --rounds must be at least 1")
    run = (args.requests, args.rounds, args.route, args.instructions)
    this = _run(BENCH.parent / "src", *run)
    base = _run(args.base_src.resolve(), *run) if args.base_src else None
    what = "OIP REST route, examples/echo" if args.route == "oip" else "Truss route, async echo"
    unit = "instructions" if args.instructions else "µs"
    print(f"### The plain path's layers, in process ({what})\n")
    print(f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"- command: `python bench/layers.py {' '.join(args_in)}`")
    if args.instructions:
        print(f"- {args.requests} requests per layer, counted by callgrind\n")
    else:
        print(f"- {args.requests} requests per layer and round, median of {args.rounds} rounds\n")
    head = f"| layers | {unit} per request | added by the layer |"
    rule = "|---|---:|---:|"
    if base is not None:
        head += f" base {unit} per request | base, added |"
        rule += "---:|---:|"
    print(head)
    print(rule)
    before = before_base = 0.0
    digits = 0 if args.instructions else 2
    for index, name in enumerate(LAYERS):
        # the last layer adds to the one before the previous: both put something on layer 5's
        if name not in this:
            continue
        after = LAYERS[4] if index == 5 else None
        added = this[name] - (this[after] if after else before)
        row = f"| {name} | {this[name]:,.{digits}f} | {added:,.{digits}f} |"
        before = this[name] if after is None else before
        if base is not None:
            if name in base:
                added = base[name] - (base[after] if after else before_base)
                row += f" {base[name]:,.{digits}f} | {added:,.{digits}f} |"
                before_base = base[name] if after is None else before_base
            else:
                row += " n/a | n/a |"
        print(row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
