"""Continuous against static batching on a synthetic generator.

    .venv/bin/python bench/continuous.py [--repeat N] [--duration S] [--warmup S] [--clients C]
        [--workers thread|process] [--quick]

The generator (bench/models/gen_continuous, bench/models/gen_static) costs ~10 ms per step for
any batch of up to 8 requests, and each request asks for a length drawn uniformly from 1 to 64
steps (one item per step; the same seeded draws for both). Continuous batching lets requests
join and leave the running batch between steps and streams each item as it is made; static
batching (Podium's dynamic batching, batch_size 8) runs a batch until its longest request is
done and then answers all of it. C clients (default 16) each send one request after another on
the Truss route for --duration seconds; the server is pinned to CPU 0, the clients (this
process, asyncio + httpx) to CPU 1. Reported: items/s delivered, time to first item (p50, p99)
and whole-request time, medians over --repeat rounds with fresh servers. ``--workers process``
serves both models from a worker process (a copy of each folder with ``workers: process``: the
continuous batch's steps cross the process boundary, docs/continuous.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from common import (
    CLIENT_CPU,
    BenchError,
    Server,
    command_line,
    exit_on_signals,
    free_port,
    log,
    machine_lines,
    median,
    package_version,
    pin_self,
    podium_argv,
)

BENCH = Path(__file__).resolve().parent
MODELS = {
    "continuous": BENCH / "models" / "gen_continuous",
    "static": BENCH / "models" / "gen_static",
}
MAX_LENGTH = 64


@dataclass
class Run:
    items: int = 0
    requests: int = 0
    first_item_s: list[float] = field(default_factory=list)
    whole_s: list[float] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def items_per_s(self) -> float:
        return self.items / self.seconds if self.seconds else 0.0


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def load(url: str, clients: int, seconds: float, seed: int) -> Run:
    """C clients, each sending requests one after another until ``seconds`` have passed; only
    requests that started inside the window count."""
    run = Run()
    deadline = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)

    async def client(k: int, http: httpx.AsyncClient) -> None:
        rng = random.Random(seed * 1000 + k)
        while time.perf_counter() < deadline:
            length = rng.randint(1, MAX_LENGTH)
            start = time.perf_counter()
            first = None
            count = 0
            async with http.stream("POST", url, json={"length": length}) as response:
                if response.status_code != 200:
                    raise BenchError(f"{url} answered {response.status_code}")
                async for line in response.aiter_lines():
                    if not line.strip():
                        continue
                    if first is None:
                        first = time.perf_counter() - start
                    value = json.loads(line)
                    count += len(value) if isinstance(value, list) else 1
            if count != length:
                raise BenchError(f"asked for {length} items, got {count}")
            run.items += count
            run.requests += 1
            run.first_item_s.append(first if first is not None else float("nan"))
            run.whole_s.append(time.perf_counter() - start)

    began = time.perf_counter()
    async with httpx.AsyncClient(timeout=60, limits=limits) as http:
        await asyncio.gather(*(client(k, http) for k in range(clients)))
    run.seconds = time.perf_counter() - began
    return run


def served(kind: str, args: argparse.Namespace) -> Path:
    """The model folder to serve: the bench's own, or a copy in worker processes."""
    folder = MODELS[kind]
    if args.workers == "thread":
        return folder
    copy = Path(tempfile.mkdtemp(prefix="podium-bench-")) / folder.name
    shutil.copytree(folder, copy)
    with (copy / "config.yaml").open("a") as config:
        config.write(f"workers: {args.workers}\n")
    return copy


def measure(kind: str, args: argparse.Namespace, round_no: int) -> Run:
    folder = served(kind, args)
    port = free_port()
    try:
        with Server(name=folder.name, argv=podium_argv(folder, port, None), port=port) as srv:
            url = f"{srv.url}/v1/models/{folder.name}:predict"
            if args.warmup:
                asyncio.run(load(url, args.clients, args.warmup, seed=999))
            return asyncio.run(load(url, args.clients, args.duration, seed=round_no))
    finally:
        if folder != MODELS[kind]:
            shutil.rmtree(folder.parent, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--workers", choices=["thread", "process"], default="thread")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.repeat, args.duration, args.warmup = 1, 4, 1
    exit_on_signals()
    pin_self(CLIENT_CPU)
    runs: dict[str, list[Run]] = {}
    for round_no in range(1, args.repeat + 1):
        for kind in MODELS:
            log(f"round {round_no}/{args.repeat}: {kind} batching")
            runs.setdefault(kind, []).append(measure(kind, args, round_no))
    print(report(runs, args))
    return 0


def report(runs: dict[str, list[Run]], args: argparse.Namespace) -> str:
    def med(kind: str, pick: Callable[[Run], float]) -> float:
        return median([pick(r) for r in runs[kind]])

    lines = ["### Continuous against static batching (synthetic generator)", ""]
    lines += machine_lines(command_line())
    lines.append(
        f"- versions: podium {package_version('podium')}, httpx {package_version('httpx')}; "
        f"{args.repeat} round(s) of {args.duration} s after {args.warmup} s warm-up; "
        f"{args.clients} clients; ~10 ms per step for any batch up to 8; lengths 1–{MAX_LENGTH}; "
        f"{args.workers} workers"
    )
    lines += [
        "",
        "| batching | items/s | requests | first item p50 ms | first item p99 ms | whole request p50 ms |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for kind in runs:
        lines.append(
            f"| {kind} | {med(kind, lambda r: r.items_per_s):,.0f} | "
            f"{med(kind, lambda r: r.requests):,.0f} | "
            f"{med(kind, lambda r: percentile(r.first_item_s, 0.5)) * 1e3:.0f} | "
            f"{med(kind, lambda r: percentile(r.first_item_s, 0.99)) * 1e3:.0f} | "
            f"{med(kind, lambda r: percentile(r.whole_s, 0.5)) * 1e3:.0f} |"
        )
    ratio = med("continuous", lambda r: r.items_per_s) / med("static", lambda r: r.items_per_s)
    ttfi = med("static", lambda r: percentile(r.first_item_s, 0.99)) / med(
        "continuous", lambda r: percentile(r.first_item_s, 0.99)
    )
    lines += [
        "",
        "| comparison | value | aim |",
        "|---|---:|---|",
        f"| continuous / static, items/s | {ratio:.2f}× | ≥ 1.5× |",
        f"| first item p99: static / continuous | {ttfi:.1f}× | continuous lower |",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
