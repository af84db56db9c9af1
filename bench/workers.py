"""Process workers against thread workers: the overhead per request, and CPU-bound scaling.

    .venv/bin/python bench/workers.py [--repeat N] [--duration S] [--warmup S] [--quick]

1. **Overhead** on `echo` (examples/echo's model): Podium with one thread worker, then with one
   process worker (`workers: process`), each whole server (worker process included) pinned to
   CPU 0 and wrk on CPU 1, at 1 connection (one request at a time) and at 64. Reported: p50 and
   p99 per request and the microseconds a process worker adds at p50.
2. **CPU-bound** on `examples/cpu-heavy` (~2 ms of pure Python per request): one thread worker
   against two process workers, the server NOT pinned (two workers need two cores), wrk with 8
   connections. Reported: requests/s and the ratio (2 cores: the ceiling is 2x, less what the
   load generator and the server's own loop take from the same two cores).

Every figure is the median over --repeat rounds; each round starts fresh servers.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from common import (
    CLIENT_CPU,
    ROOT,
    BenchError,
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
)
from run import INFER_BODY, LoadResult, pick_loadgen

EXAMPLES = ROOT / "examples"


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


def make_model(root: Path, name: str, source: Path, config: str) -> Path:
    folder = root / name
    folder.mkdir()
    shutil.copy(source / "model.py", folder / "model.py")
    (folder / "config.yaml").write_text(config)
    return folder


def measure(
    folder: Path, connections: int, args: argparse.Namespace, *, pinned: bool
) -> LoadResult:
    gen = pick_loadgen("wrk")
    port = free_port()
    kind = Server if pinned else Unpinned
    with kind(name=folder.name, argv=podium_argv(folder, port, None), port=port) as srv:
        path = f"/v2/models/{folder.name}/infer"
        status, _, body = http_post_json(port, path, INFER_BODY)
        if status != 200:
            raise BenchError(f"{folder.name} answered {status}: {body[:300]!r}")
        url = srv.url + path
        if args.warmup:
            gen.run(url, INFER_BODY, args.warmup, connections)
        result = gen.run(url, INFER_BODY, args.duration, connections)
        if result.errors:
            raise BenchError(f"{folder.name}: {result.errors} errors under load")
        return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.repeat, args.duration, args.warmup = 1, 3, 1
    exit_on_signals()
    pin_self(CLIENT_CPU)
    root = Path(tempfile.mkdtemp(prefix="podium-bench-workers-"))
    try:
        echo = EXAMPLES / "echo"
        heavy = EXAMPLES / "cpu-heavy"
        heavy_meta = (heavy / "config.yaml").read_text().split("model_metadata:", 1)[1]
        models = {
            "echo-thread": make_model(root, "echo-thread", echo, "workers: thread\n"),
            "echo-process": make_model(root, "echo-process", echo, "workers: process\n"),
            "cpu-thread": make_model(
                root, "cpu-thread", heavy, "workers: thread\nmodel_metadata:" + heavy_meta
            ),
            "cpu-process": make_model(
                root,
                "cpu-process",
                heavy,
                "workers: process\nmin_workers: 2\nmodel_metadata:" + heavy_meta,
            ),
        }
        runs: dict[tuple[str, int], list[LoadResult]] = {}
        plan = [
            ("echo-thread", 1, True),
            ("echo-process", 1, True),
            ("echo-thread", 64, True),
            ("echo-process", 64, True),
            ("cpu-thread", 8, False),
            ("cpu-process", 8, False),
        ]
        for round_no in range(1, args.repeat + 1):
            for name, connections, pinned in plan:
                log(f"round {round_no}/{args.repeat}: {name}, {connections} connection(s)")
                result = measure(models[name], connections, args, pinned=pinned)
                runs.setdefault((name, connections), []).append(result)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(report(runs, args))
    return 0


def report(runs: dict[tuple[str, int], list[LoadResult]], args: argparse.Namespace) -> str:
    def med(name: str, c: int, field: str) -> float:
        return median([getattr(r, field) for r in runs[(name, c)]])

    lines = ["### Process workers against thread workers", ""]
    lines += machine_lines(command_line())
    lines.append(
        f"- versions: podium {package_version('podium')}, uvloop {package_version('uvloop')}; "
        f"{args.repeat} round(s) of {args.duration} s after {args.warmup} s warm-up; wrk"
    )
    lines.append(
        "- overhead rows: the whole server, its worker process included, pinned to CPU 0; wrk "
        "on CPU 1. CPU-bound rows: nothing pinned (two worker processes need both cores)"
    )
    lines += [
        "",
        "| model | workers | connections | req/s | p50 ms | p99 ms | req/s min–max |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for (name, c), results in runs.items():
        rps = [r.rps for r in results]
        model, kind = name.rsplit("-", 1)
        count = "2 × process" if name == "cpu-process" else f"1 × {kind}"
        lines.append(
            f"| {model} | {count} | {c} | {median(rps):,.0f} | {med(name, c, 'p50_ms'):.3f} | "
            f"{med(name, c, 'p99_ms'):.3f} | {min(rps):,.0f}–{max(rps):,.0f} |"
        )
    lines += ["", "| comparison | value |", "|---|---:|"]
    for c in (1, 64):
        added = (med("echo-process", c, "p50_ms") - med("echo-thread", c, "p50_ms")) * 1000
        lines.append(f"| echo, {c} connection(s): p50 added by a process worker | {added:.0f} µs |")
    ratio = med("cpu-process", 8, "rps") / med("cpu-thread", 8, "rps")
    lines.append(f"| cpu-heavy: 2 process workers / 1 thread worker, req/s | {ratio:.2f}× |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
