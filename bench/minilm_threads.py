"""torch's thread count for examples/minilm-embeddings: sentences/s of its ``Embedder`` in this
process, one forward pass after another, at 1 and at 32 sentences per pass.

    HF_HUB_OFFLINE=1 taskset -c 0 .venv/bin/python bench/minilm_threads.py THREADS [--runs N]

Run it under ``taskset`` with the cores to try (the example's README has the table). Prints one
line: the CPUs, the threads, and per pass size the median (min, max) of ``--runs`` runs of 2 s.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time
from typing import Any

from embeddings import EXAMPLE, SENTENCES  # the benchmark's 48 sentences


def _embedder_module() -> Any:
    spec = importlib.util.spec_from_file_location("minilm_embedder", EXAMPLE / "embedder.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {EXAMPLE / 'embedder.py'}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rate(embedder: Any, per_pass: int, seconds: float) -> float:
    """Sentences/s over ``seconds``, passes of ``per_pass`` sentences."""
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for i in range(0, len(SENTENCES), per_pass):
            done += len(embedder.embed(SENTENCES[i : i + per_pass]))
    return done / (time.perf_counter() - start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("threads", type=int)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    embedder = _embedder_module().Embedder(threads=args.threads)
    embedder.load()
    cells = []
    for per_pass in (1, 32):
        rates = [rate(embedder, per_pass, 2.0) for _ in range(args.runs)]
        cells.append(
            f"{per_pass} per pass: {statistics.median(rates):.0f}/s "
            f"({min(rates):.0f}–{max(rates):.0f})"
        )
    cpus = ",".join(map(str, sorted(os.sched_getaffinity(0))))
    print(f"CPUs {cpus}, {args.threads} torch thread(s): {'; '.join(cells)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
