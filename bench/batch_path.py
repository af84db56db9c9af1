"""Instructions per request of the runtime's batched path alone, in process: no sockets, no
front end, a model that does nothing, so that what is counted is the scheduler's own work.

    .venv/bin/python bench/batch_path.py                    # this tree
    .venv/bin/python bench/batch_path.py --other /path/to/other/src

``--clients`` tasks (128) each call the scheduler's ``infer`` in a loop on the same event loop
(uvloop, as ``podium serve`` runs), for a model with ``batch_size`` 32 and a 5 ms delay whose
async ``predict`` returns its inputs (``batched``), and the same model unbatched under the
direct scheduler at ``predict_concurrency`` 1 (``direct``), for comparison. Each figure is the
difference of two runs under valgrind's callgrind (``--requests`` and five times as many), so
start-up and imports cancel out; it does not move with the machine's load. As ``podium serve``
does, the process settles its heap (``podium.heap.settle``) before the requests.

``--cpu ROUNDS`` counts CPU time in place of instructions: the process's user and system time
(``os.times``) per request over ``--requests`` requests after a warm-up of 2,000, without
valgrind, in ``ROUNDS`` rounds alternating the trees (the median printed last). It sees what
instructions do not: the kernel's side of system calls (CPython 3.11 makes one, ``getpid``, in
every ``asyncio.get_running_loop()``). Its clock ticks in 10 ms: give it 100,000 requests or
more.

    .venv/bin/python bench/batch_path.py --other /path/to/other/src --kinds batched \
        --cpu 5 --requests 300000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


class BatchedModel:
    async def predict(self, inputs: list) -> list:
        return inputs


class SingleModel:
    async def predict(self, inputs: object) -> object:
        return inputs


async def _drive(kind: str, requests: int, clients: int) -> int:
    """``requests`` requests by ``clients`` tasks; the batches run (0 for ``direct``)."""
    from concurrent.futures import ThreadPoolExecutor

    from podium.config import ModelConfig
    from podium.heap import settle
    from podium.model.native import NativeModel, inspect_class
    from podium.runtime.batcher import BatchScheduler
    from podium.runtime.direct import DirectScheduler

    executor = ThreadPoolExecutor(2)
    cls = BatchedModel if kind == "batched" else SingleModel
    instance = NativeModel(
        inspect_class(cls),
        ModelConfig(name="m"),
        model_dir=Path("."),
        secrets={},
        executor=executor,
    )
    scheduler: BatchScheduler | DirectScheduler
    if kind == "batched":
        scheduler = BatchScheduler(
            instance,
            model="m",
            batch_size=32,
            max_batch_delay_ms=5.0,
            max_queue_size=10_000,
            concurrency=1,
        )
    else:
        scheduler = DirectScheduler(instance, model="m", concurrency=1, max_queue_size=10_000)
    await scheduler.start()
    # as a server does once it has started: what start-up built is frozen out of the garbage
    # collector's walks, whose timing would otherwise move the counts by thousands
    settle()
    left = [requests]
    inputs = {"input-0": [1.0, 2.0, 3.0, 4.0]}

    async def client() -> None:
        while left[0] > 0:
            left[0] -= 1
            await scheduler.infer(inputs, None)

    await asyncio.gather(*(client() for _ in range(clients)))
    stats = scheduler.statistics()
    await scheduler.close()
    executor.shutdown()
    return stats.get("batches", 0)


def _instructions(src: Path, kind: str, requests: int, clients: int) -> tuple[int, int]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        argv = [sys.executable, __file__, "--run", kind, "--requests", str(requests)]
        argv += ["--clients", str(clients)]
        run = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *argv],
            env={**os.environ, "PYTHONPATH": str(src), "PYTHONHASHSEED": "0"},
            capture_output=True,
            text=True,
            check=True,
            timeout=900,
        )
        batches = int(re.findall(r"(?m)^batches (\d+)$", run.stdout)[0])
        text = out.read_text(errors="replace")
        return int(re.findall(r"(?m)^(?:summary|totals):\s*(\d+)", text)[0]), batches


def _cpu(src: Path, kind: str, requests: int, clients: int) -> tuple[float, float]:
    """User and system CPU µs per request of ``requests`` requests, after a warm-up."""
    argv = [sys.executable, __file__, "--run", kind, "--requests", str(requests)]
    argv += ["--clients", str(clients), "--cpu", "1"]
    run = subprocess.run(
        argv,
        env={**os.environ, "PYTHONPATH": str(src), "PYTHONHASHSEED": "0"},
        capture_output=True,
        text=True,
        check=True,
        timeout=900,
    )
    user, system = re.findall(r"(?m)^cpu (\S+) (\S+)$", run.stdout)[0]
    return float(user), float(system)


async def _timed(kind: str, requests: int, clients: int) -> tuple[float, float]:
    await _drive(kind, 2000, clients)
    before = os.times()
    await _drive(kind, requests, clients)
    after = os.times()
    return (
        (after.user - before.user) / requests * 1e6,
        (after.system - before.system) / requests * 1e6,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--other", type=Path, help="another tree's src/, counted after this one")
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--clients", type=int, default=128)
    parser.add_argument("--kinds", default="batched,direct")
    parser.add_argument("--cpu", type=int, metavar="ROUNDS", help="CPU time, not instructions")
    parser.add_argument("--run", help=argparse.SUPPRESS)  # the measured child
    args = parser.parse_args()
    if args.run:
        import uvloop

        if args.cpu:
            print("cpu {} {}".format(*uvloop.run(_timed(args.run, args.requests, args.clients))))
        else:
            print(f"batches {uvloop.run(_drive(args.run, args.requests, args.clients))}")
        return 0
    trees = [("this", ROOT / "src")]
    if args.other is not None:
        trees.append(("other", args.other.resolve()))
    if args.cpu:
        print("| tree | scheduler | user + system µs per request, each round | median |")
        print("|---|---|---|---:|")
        for kind in args.kinds.split(","):
            rounds: dict[str, list[float]] = {name: [] for name, _ in trees}
            for _ in range(args.cpu):
                for name, src in trees:
                    rounds[name].append(sum(_cpu(src, kind, args.requests, args.clients)))
            for name, _ in trees:
                each = rounds[name]
                median = sorted(each)[len(each) // 2]
                shown = ", ".join(f"{x:.2f}" for x in each)
                print(f"| {name} | {kind} | {shown} | {median:.2f} |", flush=True)
        return 0
    print("| tree | scheduler | instructions per request | requests per batch |")
    print("|---|---|---:|---:|")
    for kind in args.kinds.split(","):
        for name, src in trees:
            small, _ = _instructions(src, kind, args.requests, args.clients)
            large, batches = _instructions(src, kind, 5 * args.requests, args.clients)
            per = (large - small) / (4 * args.requests)
            fill = f"{5 * args.requests / batches:.1f}" if batches else "—"
            print(f"| {name} | {kind} | {per:,.0f} | {fill} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
