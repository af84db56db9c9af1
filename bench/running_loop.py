"""CPU time of one look-up of the running event loop: ``asyncio.get_running_loop()`` (on
Python 3.11 a ``getpid`` system call each time) against ``podium.turn.running_loop()``.

    PYTHONPATH=src .venv/bin/python bench/running_loop.py [--calls N] [--rounds R]

Each is called ``--calls`` times on a running uvloop loop, timed by ``time.process_time()``
(the process's CPU time, kernel time included: what a system call costs shows, unlike in
callgrind's counts); an empty lambda's calls are subtracted. The figure is the median of
``--rounds``, in ns per call.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time


async def _measure(calls: int, rounds: int) -> dict[str, float]:
    from podium.turn import running_loop

    ways = {
        "(empty)": lambda: None,
        "asyncio.get_running_loop": asyncio.get_running_loop,
        "podium.turn.running_loop": running_loop,
    }
    per_round: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(rounds):
        for name, way in ways.items():
            start = time.process_time()
            for _ in range(calls):
                way()
            per_round[name].append((time.process_time() - start) / calls * 1e9)
    empty = statistics.median(per_round.pop("(empty)"))
    return {name: statistics.median(times) - empty for name, times in per_round.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    import uvloop

    figures = uvloop.run(_measure(args.calls, args.rounds))
    for name, ns in figures.items():
        print(f"{name:26} {ns:6.1f} ns CPU per call")


if __name__ == "__main__":
    main()
