"""Process workers against thread workers: overhead per request, pipelining, large tensors and
CPU-bound scaling (issue 14, item 3).

    .venv/bin/python bench/workers.py [--repeat N] [--duration S] [--warmup S] [--quick]
                                      [--only ROW,...] [--base-src DIR] [--also-src TAG=DIR]

1. **Overhead** on `echo` (examples/echo's model): Podium with one thread worker, then with one
   process worker (`workers: process`, `predict_concurrency` 1), each whole server (worker
   process included) pinned to CPU 0 and wrk on CPU 1, at 1 connection (one request at a time:
   the p50 a process worker adds) and at 64 (req/s: is more than one request in flight per
   worker process?).
2. **Large tensors**: a model that returns its 4 MB float32 input (OIP binary tensor extension
   both ways), one thread worker against one process worker, one connection from a Python client
   on CPU 1; pinned as above. Reported: p50 per request.
3. **The process boundary alone** (`hop` rows): a process-worker version driven directly
   through its scheduler, no HTTP server (which for 4 MB bodies costs ten times what the boundary
   does): an async `predict` returning its inputs, 1 and 64 requests in flight with 4 float32,
   a sync `predict` that computes for 1 ms (`hop-1ms`, 1 and 64 in flight), and 1 in flight
   with 1, 4 and 16 MB of float32 in and out (`hop-1mb`, `hop-big`, `hop-16mb`); the driver and
   its worker process pinned to CPU 0. Reported: requests/s and CPU per request of both
   processes.
4. **CPU-bound** on `examples/cpu-heavy` (~2 ms of pure Python per request): one process worker
   against two (and one thread worker, for reference), the server NOT pinned (two workers need
   two cores), wrk with 8 connections.

Server CPU per request counts the server process and its worker processes (all their threads),
read from /proc over the measured run; so do the context switches per request.

``--base-src DIR`` runs every row again with ``PYTHONPATH=DIR/src`` (an older checkout, e.g.
``git archive HEAD src | tar -x -C DIR``), in the same rounds, alternating, and prints each aim
as a line with both figures; ``--also-src TAG=DIR`` (repeatable) adds more such trees, as rows
of the table only (a variant of the base, say). Every figure is the median over --repeat rounds; each round starts
fresh servers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from common import (
    CLIENT_CPU,
    ROOT,
    BenchError,
    ProcessUsage,
    Server,
    command_line,
    exit_on_signals,
    free_port,
    http_post_json,
    log,
    machine_lines,
    median,
    package_version,
    pin_self,
    podium_argv,
    process_usage,
)
from run import INFER_BODY, LoadResult, pick_loadgen

EXAMPLES = ROOT / "examples"

#: The large-tensor case: 4 MB of float32 in, the same out.
BIG_ELEMENTS = 1 << 20

BIG_MODEL = '''\
"""Returns its input: 4 MB of float32 in, the same 4 MB out (bench/workers.py)."""


class Model:
    def predict(self, inputs):
        return {"y": inputs["x"]}
'''


class Unpinned(Server):
    """A server that may use every CPU this benchmark started with (its worker processes need
    more than one), although the benchmark itself is pinned to the load generator's CPU."""

    def start(self) -> None:
        import common

        cpus = ",".join(str(c) for c in sorted(common._START_CPUS))
        saved = common.pinned
        common.pinned = lambda argv, cpu: ["taskset", "-c", cpus, *argv]  # type: ignore[assignment]
        try:
            super().start()
        finally:
            common.pinned = saved  # type: ignore[assignment]


def tree_usage(pid: int) -> ProcessUsage:
    """CPU time and context switches of ``pid`` and every process below it (worker processes run
    in their own session, so the process group would miss them)."""
    total = ProcessUsage(0.0, 0, 0)
    todo = [pid]
    while todo:
        p = todo.pop()
        used = process_usage(p)
        total = ProcessUsage(
            total.cpu_s + used.cpu_s,
            total.voluntary + used.voluntary,
            total.involuntary + used.involuntary,
        )
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{p}/task").iterdir():
                with contextlib.suppress(OSError):
                    todo += [int(c) for c in (task / "children").read_text().split()]
    return total


@dataclass
class Row:
    name: str  # the model folder
    connections: int
    pinned: bool
    big: bool = False  # the large-tensor client instead of wrk


def big_body() -> tuple[bytes, dict[str, str]]:
    import numpy as np

    raw = np.arange(BIG_ELEMENTS, dtype=np.float32).tobytes()
    head = json.dumps(
        {
            "inputs": [
                {
                    "name": "x",
                    "shape": [BIG_ELEMENTS],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": len(raw)},
                }
            ],
            "parameters": {"binary_data_output": True},
        }
    ).encode()
    headers = {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(len(head)),
    }
    return head + raw, headers


def run_big(port: int, path: str, seconds: float) -> LoadResult:
    """One connection, one request after another, for ``seconds``: latencies and req/s."""
    body, headers = big_body()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    times: list[float] = []
    errors = 0
    try:
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            t0 = time.perf_counter()
            conn.request("POST", path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            times.append(time.perf_counter() - t0)
            if resp.status != 200 or len(data) < 4 * BIG_ELEMENTS:
                errors += 1
        elapsed = time.perf_counter() - start
    finally:
        conn.close()
    times.sort()
    return LoadResult(
        rps=len(times) / elapsed,
        p50_ms=1000 * times[len(times) // 2],
        p99_ms=1000 * times[min(len(times) - 1, int(len(times) * 0.99))],
        requests=len(times),
        non_2xx=errors,
        socket_errors=0,
    )


def make_model(root: Path, name: str, source: Path | None, config: str) -> Path:
    folder = root / name
    folder.mkdir()
    if source is None:
        (folder / "model.py").write_text(BIG_MODEL)
    else:
        shutil.copy(source / "model.py", folder / "model.py")
    (folder / "config.yaml").write_text(config)
    return folder


def measure(folder: Path, row: Row, env: dict[str, str], args: argparse.Namespace) -> LoadResult:
    port = free_port()
    kind = Server if row.pinned else Unpinned
    argv = podium_argv(folder, port, None)
    with kind(name=folder.name, argv=argv, port=port, env=env) as srv:
        path = f"/v2/models/{folder.name}/infer"
        if row.big:
            run_big(port, path, args.warmup or 0.5)
            assert srv.proc is not None
            before = tree_usage(srv.proc.pid)
            result = run_big(port, path, args.duration)
            used = tree_usage(srv.proc.pid) - before
        else:
            status, _, body = http_post_json(port, path, INFER_BODY)
            if status != 200:
                raise BenchError(f"{folder.name} answered {status}: {body[:300]!r}")
            gen = pick_loadgen("wrk")
            url = srv.url + path
            if args.warmup:
                gen.run(url, INFER_BODY, args.warmup, row.connections)
            assert srv.proc is not None
            before = tree_usage(srv.proc.pid)
            result = gen.run(url, INFER_BODY, args.duration, row.connections)
            used = tree_usage(srv.proc.pid) - before
        if result.errors:
            raise BenchError(f"{folder.name}: {result.errors} errors under load")
        if result.requests:
            result.server_cpu_us = 1e6 * used.cpu_s / result.requests
            result.server_vcs = used.voluntary / result.requests
            result.server_ics = used.involuntary / result.requests
        return result


HOP_MODEL = """\
class Model:
    async def predict(self, inputs):
        return inputs
"""

#: The 1 ms model of ``hop-1ms``: a sync predict that computes (holds the CPU) for 1 ms.
HOP_1MS_MODEL = """\
import time


class Model:
    def predict(self, inputs):
        end = time.perf_counter() + 0.001
        while time.perf_counter() < end:
            pass
        return inputs
"""

#: The float32 elements each way of a hop row.
HOP_SIZES = {
    "hop-small": 4,
    "hop-1ms": 4,
    "hop-1mb": 1 << 18,
    "hop-big": BIG_ELEMENTS,
    "hop-16mb": 1 << 22,
}


async def _hop(in_flight: int, count: int, name: str) -> dict[str, float]:
    """Run inside a ``--hop`` child: ``count`` requests through one process worker."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    from podium.model.discovery import discover_all
    from podium.runtime.loading import build_version

    root = Path(tempfile.mkdtemp(prefix="podium-bench-hop-"))
    try:
        folder = root / "hop"
        folder.mkdir()
        (folder / "model.py").write_text(HOP_1MS_MODEL if name == "hop-1ms" else HOP_MODEL)
        (folder / "config.yaml").write_text("workers: process\n")
        found, _ = discover_all(folder)
        mv = build_version(found[0], secrets={}, executor=ThreadPoolExecutor(2))
        await mv.load()
        size = HOP_SIZES[name]
        inputs = {"x": np.arange(size, dtype=np.float32)}
        slots = asyncio.Semaphore(in_flight)

        async def one() -> None:
            async with slots:
                out = await mv.scheduler.infer(inputs, None)
                if out["x"].size != size:
                    raise BenchError("hop: wrong answer")

        await asyncio.gather(*(one() for _ in range(max(20, count // 10))))  # warm-up
        before = tree_usage(os.getpid())
        start = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(count)))
        elapsed = time.perf_counter() - start
        used = tree_usage(os.getpid()) - before
        await mv.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {
        "rps": count / elapsed,
        "cpu_us": 1e6 * used.cpu_s / count,
        "vcs": used.voluntary / count,
        "ics": used.involuntary / count,
    }


def measure_hop(row: Row, env: dict[str, str], args: argparse.Namespace) -> LoadResult:
    per_s = {"hop-small": 4000, "hop-1ms": 500, "hop-1mb": 160, "hop-big": 40, "hop-16mb": 10}
    count = int(per_s[row.name] * args.duration)
    argv = ["taskset", "-c", "0", sys.executable, __file__, "--hop"]
    argv += [str(row.connections), str(count), row.name]
    done = subprocess.run(
        argv, env={**os.environ, **env}, capture_output=True, text=True, timeout=600
    )
    if done.returncode != 0:
        raise BenchError(f"hop run failed:\n{done.stderr[-2000:]}")
    data = json.loads(done.stdout.strip().splitlines()[-1])
    result = LoadResult(
        rps=data["rps"],
        p50_ms=float("nan"),
        p99_ms=float("nan"),
        requests=count,
        non_2xx=0,
        socket_errors=0,
    )
    result.server_cpu_us, result.server_vcs, result.server_ics = (
        data["cpu_us"],
        data["vcs"],
        data["ics"],
    )
    return result


PLAN = [
    Row("echo-thread", 1, True),
    Row("echo-process", 1, True),
    Row("echo-thread", 64, True),
    Row("echo-process", 64, True),
    Row("big-thread", 1, True, big=True),
    Row("big-process", 1, True, big=True),
    Row("hop-small", 1, True),
    Row("hop-small", 64, True),
    Row("hop-1ms", 1, True),
    Row("hop-1ms", 64, True),
    Row("hop-1mb", 1, True),
    Row("hop-big", 1, True),
    Row("hop-16mb", 1, True),
    Row("cpu-thread", 8, False),
    Row("cpu-process-1", 8, False),
    Row("cpu-process-2", 8, False),
]

#: What a row's model column says, where its name alone is ambiguous.
MODELS = {
    "hop-small": "hop, 4 float32",
    "hop-1ms": "hop, 1 ms sync predict, 4 float32",
    "hop-1mb": "hop, 1 MB in and out",
    "hop-big": "hop, 4 MB in and out",
    "hop-16mb": "hop, 16 MB in and out",
    "big-thread": "big (4 MB in and out)",
    "big-process": "big (4 MB in and out)",
}

COUNTS = {
    "cpu-process-1": "1 × process",
    "cpu-process-2": "2 × process",
    "hop-small": "1 × process, no HTTP",
    "hop-1ms": "1 × process, no HTTP",
    "hop-1mb": "1 × process, no HTTP",
    "hop-big": "1 × process, no HTTP",
    "hop-16mb": "1 × process, no HTTP",
}


def main() -> int:
    if sys.argv[1:2] == ["--hop"]:  # a hop row's own process (see measure_hop)
        in_flight, count, name = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
        print(json.dumps(asyncio.run(_hop(in_flight, count, name))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", help="comma-separated row models (e.g. echo-process,big-process)")
    parser.add_argument(
        "--base-src", help="another checkout whose src/ runs every row again (the 'before')"
    )
    parser.add_argument(
        "--also-src",
        action="append",
        default=[],
        metavar="TAG=DIR",
        help="one more checkout whose src/ runs every row again, as rows tagged TAG",
    )
    args = parser.parse_args()
    if args.quick:
        args.repeat, args.duration, args.warmup = 1, 3, 1
    exit_on_signals()
    pin_self(CLIENT_CPU)
    sources: list[tuple[str, dict[str, str]]] = [("", {"PYTHONPATH": str(ROOT / "src")})]
    if args.base_src:
        sources.append(("base", {"PYTHONPATH": str(Path(args.base_src).resolve() / "src")}))
    for also in args.also_src:
        tag, _, folder = also.partition("=")
        sources.append((tag, {"PYTHONPATH": str(Path(folder).resolve() / "src")}))
    plan = PLAN
    if args.only:
        wanted = set(args.only.split(","))
        plan = [r for r in PLAN if r.name in wanted]
    root = Path(tempfile.mkdtemp(prefix="podium-bench-workers-"))
    try:
        echo = EXAMPLES / "echo"
        heavy = EXAMPLES / "cpu-heavy"
        heavy_meta = (
            "model_metadata:" + (heavy / "config.yaml").read_text().split("model_metadata:", 1)[1]
        )
        models = {
            "echo-thread": make_model(root, "echo-thread", echo, "workers: thread\n"),
            "echo-process": make_model(root, "echo-process", echo, "workers: process\n"),
            "big-thread": make_model(root, "big-thread", None, "workers: thread\n"),
            "big-process": make_model(root, "big-process", None, "workers: process\n"),
            "cpu-thread": make_model(root, "cpu-thread", heavy, "workers: thread\n" + heavy_meta),
            "cpu-process-1": make_model(
                root, "cpu-process-1", heavy, "workers: process\nmin_workers: 1\n" + heavy_meta
            ),
            "cpu-process-2": make_model(
                root, "cpu-process-2", heavy, "workers: process\nmin_workers: 2\n" + heavy_meta
            ),
        }
        runs: dict[tuple[str, str, int], list[LoadResult]] = {}
        for round_no in range(1, args.repeat + 1):
            for row in plan:
                for tag, env in sources:
                    what = f"{row.name}{' [' + tag + ']' if tag else ''}, {row.connections} conn"
                    log(f"round {round_no}/{args.repeat}: {what}")
                    try:
                        if row.name.startswith("hop-"):
                            result = measure_hop(row, env, args)
                        else:
                            result = measure(models[row.name], row, env, args)
                    except BenchError as exc:
                        log(f"FAILED: {exc}")
                        continue
                    log(
                        f"  {result.rps:,.0f} req/s, p50 {result.p50_ms:.3f} ms, "
                        f"{result.server_cpu_us:.0f} µs CPU/req"
                    )
                    runs.setdefault((tag, row.name, row.connections), []).append(result)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(report(runs, args, [tag for tag, _ in sources]))
    return 0


def report(
    runs: dict[tuple[str, str, int], list[LoadResult]], args: argparse.Namespace, tags: list[str]
) -> str:
    def med(tag: str, name: str, c: int, field: str) -> float:
        results = runs.get((tag, name, c))
        if not results:
            return float("nan")
        return median([getattr(r, field) for r in results])

    lines = ["### Process workers against thread workers", ""]
    lines += machine_lines(command_line())
    with contextlib.suppress(OSError):
        load = Path("/proc/loadavg").read_text().split()[:3]
        lines.append(f"- load average at the end: {' '.join(load)}")
    lines.append(
        f"- versions: podium {package_version('podium')}, uvloop {package_version('uvloop')}; "
        f"{args.repeat} round(s) of {args.duration} s after {args.warmup} s warm-up; wrk "
        "(large tensors: one Python client connection)"
    )
    lines.append(
        "- echo and large-tensor rows: the whole server, its worker process included, pinned to "
        "CPU 0; load on CPU 1. CPU-bound rows: nothing pinned (two worker processes need both "
        "cores). Server CPU and context switches: the server and its worker processes"
    )
    lines += [
        "",
        "| source | model | workers | conn | req/s | p50 ms | p99 ms | req/s min–max | "
        "server CPU µs/req | cs/req (vol.+invol.) |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for (tag, name, c), results in runs.items():
        rps = [r.rps for r in results]
        model, kind = name.split("-", 1)
        model = MODELS.get(name, model)
        count = COUNTS.get(name, f"1 × {kind}")
        lines.append(
            f"| {tag or 'this'} | {model} | {count} | {c} | {median(rps):,.0f} | "
            f"{med(tag, name, c, 'p50_ms'):.3f} | {med(tag, name, c, 'p99_ms'):.3f} | "
            f"{min(rps):,.0f}–{max(rps):,.0f} | {med(tag, name, c, 'server_cpu_us'):.0f} | "
            f"{med(tag, name, c, 'server_vcs'):.2f}+{med(tag, name, c, 'server_ics'):.2f} |"
        )

    def aims(tag: str) -> list[tuple[str, float, str]]:
        added = (
            med(tag, "echo-process", 1, "p50_ms") - med(tag, "echo-thread", 1, "p50_ms")
        ) * 1000
        rps64 = med(tag, "echo-process", 64, "rps")
        big = (med(tag, "big-process", 1, "p50_ms") - med(tag, "big-thread", 1, "p50_ms")) * 1000
        scale = med(tag, "cpu-process-2", 8, "rps") / med(tag, "cpu-process-1", 8, "rps")
        scale_t = med(tag, "cpu-process-2", 8, "rps") / med(tag, "cpu-thread", 8, "rps")
        cpu64 = med(tag, "echo-process", 64, "server_cpu_us")
        hop64 = med(tag, "hop-small", 64, "rps")
        hop_big = med(tag, "hop-big", 1, "server_cpu_us")
        hop_ms = med(tag, "hop-1ms", 64, "server_cpu_us")
        hop_1mb = med(tag, "hop-1mb", 1, "server_cpu_us")
        hop_16mb = med(tag, "hop-16mb", 1, "server_cpu_us")
        return [
            ("echo, 1 connection: p50 added by a process worker (aim ≤ 60 µs)", added, "µs"),
            ("echo, 64 connections, 1 process worker, req/s (aim ≥ 12,000)", rps64, "req/s"),
            ("echo, 64 connections, 1 process worker, server CPU per request", cpu64, "µs"),
            ("4 MB float32 in and out: p50 added by a process worker", big, "µs"),
            ("no HTTP: 64 in flight through 1 process worker, req/s", hop64, "req/s"),
            ("no HTTP: 1 ms model, 64 in flight, CPU per request (both processes)", hop_ms, "µs"),
            ("no HTTP: 1 MB float32 in and out, CPU per request (both processes)", hop_1mb, "µs"),
            ("no HTTP: 4 MB float32 in and out, CPU per request (both processes)", hop_big, "µs"),
            ("no HTTP: 16 MB float32 in and out, CPU per request (both processes)", hop_16mb, "µs"),
            ("cpu-heavy: 2 process workers / 1 process worker, req/s (aim ≥ 1.8×)", scale, "×"),
            ("cpu-heavy: 2 process workers / 1 thread worker, req/s", scale_t, "×"),
        ]

    def fmt(value: float, unit: str) -> str:
        if value != value:  # nan
            return "—"
        if unit == "×":
            return f"{value:.2f}×"
        return f"{value:,.0f} {unit}"

    lines += [""]
    if "base" in tags:
        lines += ["| aim | before (base) | after (this) |", "|---|---:|---:|"]
        for (label, after, unit), (_, before, _) in zip(aims(""), aims("base"), strict=True):
            lines.append(f"| {label} | {fmt(before, unit)} | {fmt(after, unit)} |")
    else:
        lines += ["| aim | measured |", "|---|---:|"]
        for label, value, unit in aims(""):
            lines.append(f"| {label} | {fmt(value, unit)} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
