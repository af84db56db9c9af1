"""Stateful sequences: throughput of many sequences of 20 requests each, and what a request costs
inside a sequence against the same model without sequences.

    .venv/bin/python bench/sequences.py [--repeat N] [--duration S] [--warmup S] [--quick]

The model is bench/models/running_total (a running total in the sequence's state; without
``sequence_batching`` the same code answers the value alone). Podium serves it on the Truss route
with 1 and with 2 thread workers, with and without ``sequence_batching``; the server is pinned to
CPU 0 and wrk to CPU 1 (64 connections, bench/sequence.lua: 256 sequences side by side, each of
20 requests, the last one ending it with ``ts_request_sequence_id_end``). Reported: requests/s,
p50/p99, and the microseconds per request that sequences add (from the request rates). Every
figure is the median over --repeat rounds; each round starts fresh servers.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

from common import (
    CLIENT_CPU,
    BenchError,
    Server,
    command_line,
    ensure_apt_tool,
    exit_on_signals,
    free_port,
    http_post_json,
    log,
    machine_lines,
    median,
    package_version,
    pin_self,
    pinned,
    podium_argv,
)
from run import LoadResult, parse_wrk

BENCH = Path(__file__).resolve().parent
MODEL = BENCH / "models" / "running_total" / "model.py"
LUA = BENCH / "sequence.lua"
CONNECTIONS = 64
SEQUENCES = 256
LENGTH = 20


def make_model(root: Path, name: str, *, sequences: bool, workers: int) -> Path:
    folder = root / name
    folder.mkdir()
    shutil.copy(MODEL, folder / "model.py")
    config = f"min_workers: {workers}\n"
    if sequences:
        # Room for every sequence the load opens and closes (ended ones leave at once).
        config += "sequence_batching: true\nmax_sequence_queue_size: 8\nmax_num_sequences: 4096\n"
    (folder / "config.yaml").write_text(config)
    return folder


def wrk(url: str, duration: int, *, sequences: bool) -> LoadResult:
    path = ensure_apt_tool("wrk", "wrk")
    argv = [path, "-t1", f"-c{CONNECTIONS}", f"-d{duration}s", "--latency", "-s", str(LUA), url]
    env = {
        **os.environ,
        "SEQUENCES": str(SEQUENCES if sequences else 0),
        "LENGTH": str(LENGTH),
        "RUN": uuid.uuid4().hex[:8],  # a closed sequence's id is never reused
    }
    done = subprocess.run(
        pinned(argv, CLIENT_CPU), capture_output=True, text=True, timeout=duration + 60, env=env
    )
    if done.returncode != 0:
        raise BenchError(f"wrk exited {done.returncode}: {done.stderr[-2000:]}")
    return parse_wrk(done.stdout)


def measure(folder: Path, args: argparse.Namespace, *, sequences: bool) -> LoadResult:
    port = free_port()
    with Server(name=folder.name, argv=podium_argv(folder, port, None), port=port) as srv:
        path = f"/v1/models/{folder.name}:predict"
        status, _, body = http_post_json(port, path, b'{"value": 1}')
        if status != 200:
            raise BenchError(f"{folder.name} answered {status}: {body[:300]!r}")
        url = srv.url + path
        if args.warmup:
            wrk(url, args.warmup, sequences=sequences)
        result = wrk(url, args.duration, sequences=sequences)
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
    root = Path(tempfile.mkdtemp(prefix="podium-bench-sequences-"))
    cases = [(s, w) for w in (1, 2) for s in (False, True)]
    runs: dict[tuple[bool, int], list[LoadResult]] = {}
    try:
        models = {
            (s, w): make_model(root, f"total-{'seq' if s else 'plain'}-{w}", sequences=s, workers=w)
            for s, w in cases
        }
        for round_no in range(1, args.repeat + 1):
            for s, w in cases:
                log(
                    f"round {round_no}/{args.repeat}: {'sequences' if s else 'plain'}, {w} worker(s)"
                )
                runs.setdefault((s, w), []).append(measure(models[(s, w)], args, sequences=s))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(report(runs, args))
    return 0


def report(runs: dict[tuple[bool, int], list[LoadResult]], args: argparse.Namespace) -> str:
    lines = ["### Stateful sequences: many sequences of 20 requests", ""]
    lines += machine_lines(command_line())
    lines.append(
        f"- versions: podium {package_version('podium')}; {args.repeat} round(s) of "
        f"{args.duration} s after {args.warmup} s warm-up; wrk, {CONNECTIONS} connections, "
        f"{SEQUENCES} sequences side by side, {LENGTH} requests each (bench/sequence.lua)"
    )
    lines += [
        "",
        "| model | thread workers | req/s | p50 ms | p99 ms | req/s min–max |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for (s, w), results in runs.items():
        rps = [r.rps for r in results]
        lines.append(
            f"| {'sequences' if s else 'no sequences'} | {w} | {median(rps):,.0f} | "
            f"{median([r.p50_ms for r in results]):.2f} | "
            f"{median([r.p99_ms for r in results]):.2f} | {min(rps):,.0f}–{max(rps):,.0f} |"
        )
    lines += ["", "| comparison | value |", "|---|---:|"]
    for w in (1, 2):
        plain = median([r.rps for r in runs[(False, w)]])
        seq = median([r.rps for r in runs[(True, w)]])
        added = (1 / seq - 1 / plain) * 1e6
        lines.append(f"| {w} worker(s): µs per request added by sequences | {added:.1f} µs |")
        lines.append(f"| {w} worker(s): sequences / no sequences, req/s | {seq / plain:.2f}× |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
