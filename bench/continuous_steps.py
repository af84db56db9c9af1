"""What one continuous-batching step costs the scheduler, in a thread worker and in a worker
process (where each step crosses the process boundary: docs/continuous.md, "Worker processes").

    .venv/bin/python bench/continuous_steps.py [--rounds N] [--steps S]

A model whose ``step`` only emits one int per generation (no model work at all), batch 8, driven
through ``ContinuousScheduler`` in this process (no HTTP): 8 requests of S steps each, the best
of N rounds. Reported: steps per second and microseconds per step for each kind of worker; the
difference is what the boundary adds to every step (a real model's step time comes on top).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from podium.model.discovery import discover_all
from podium.runtime.loading import build_version

CODE = """
class Model:
    async def step(self, batch):
        for g in batch:
            i = g.state["i"] = g.state.get("i", 0) + 1
            g.emit(i)
            if i >= g.inputs["n"]:
                g.finish()
"""


async def steps_per_second(kind: str, rounds: int, steps: int) -> float:
    folder = Path(tempfile.mkdtemp(prefix="podium-bench-")) / "m"
    folder.mkdir()
    (folder / "model.py").write_text(CODE)
    (folder / "config.yaml").write_text(
        f"continuous_batching: true\nbatch_size: 8\nstream_buffer: 64\nworkers: {kind}\n"
    )
    found, problems = discover_all(folder)
    if problems:
        raise SystemExit("; ".join(problems))
    with ThreadPoolExecutor(2) as executor:
        mv = build_version(found[0], secrets={}, executor=executor)
        await mv.pool.start()  # type: ignore[union-attr]
        s = mv.scheduler
        try:
            await s.infer({"n": 50}, None)  # warm-up
            best = 0.0
            for _ in range(rounds):
                before, began = s.steps, time.perf_counter()  # type: ignore[attr-defined]
                await asyncio.gather(*(s.infer({"n": steps}, None) for _ in range(8)))
                rate = (s.steps - before) / (time.perf_counter() - began)  # type: ignore[attr-defined]
                best = max(best, rate)
            return best
        finally:
            await s.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=500)
    args = parser.parse_args()
    print("| worker | steps/s | µs per step |")
    print("|---|---:|---:|")
    for kind in ("thread", "process"):
        rate = asyncio.run(steps_per_second(kind, args.rounds, args.steps))
        print(f"| {kind} | {rate:,.0f} | {1e6 / rate:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
