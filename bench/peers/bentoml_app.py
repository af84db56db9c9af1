"""BentoML side of bench/peers.py. Runs in bench/.venvs/bentoml, from this folder:

    bench/.venvs/bentoml/bin/bentoml serve bentoml_app:Peers --host 127.0.0.1 --port PORT

One service (BentoML's defaults: one worker process under its arbiter) with one route per
workload: ``/predict_sync`` (plain ``def``: BentoML runs it in a thread pool) and
``/predict_async`` (``async def``), both ``{"x": [...]}`` → ``{"y": [...]}``; ``/stream``, an async
generator endpoint, ``{"n": N}`` → N JSON lines ``{"i": k}``; ``/batch``, a batchable endpoint
(``max_batch_size`` 32, ``max_latency_ms`` 1000): each request carries a batch of one,
``{"x": [[...]]}``, BentoML's adaptive batching joins requests along the first dimension, a batch
sleeps 1 ms + 0.05 ms per item and every answer carries the model's counters.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import bentoml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common_model import Counters, batch_seconds  # noqa: E402


@bentoml.service(workers=1)
class Peers:
    def __init__(self) -> None:
        self.counters = Counters()

    @bentoml.api
    def predict_sync(self, x: list[float]) -> dict[str, Any]:
        return {"y": x}

    @bentoml.api
    async def predict_async(self, x: list[float]) -> dict[str, Any]:
        return {"y": x}

    @bentoml.api
    async def stream(self, n: int) -> AsyncGenerator[str, None]:
        for k in range(n):
            yield json.dumps({"i": k}) + "\n"

    @bentoml.api(batchable=True, max_batch_size=32, max_latency_ms=1000)
    async def batch(self, x: list[list[float]]) -> list[dict[str, Any]]:
        started = time.monotonic()
        await asyncio.sleep(batch_seconds(len(x)))
        stats = self.counters.record(started)
        return [{"y": item, **stats} for item in x]
