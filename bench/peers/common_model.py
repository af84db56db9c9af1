"""What every peer's batching model does, shared by the apps in this folder (each runs in its
own server's virtual env, so this file imports nothing but the standard library).

A batch of ``n`` items takes ``BASE_S + PER_ITEM_S * n`` (waiting, like an accelerator), and the
model counts its batches and the time it was busy; every answer carries the counters so that
bench/peers.py can read them before and after a run."""

from __future__ import annotations

import time

BASE_S = 0.001
PER_ITEM_S = 0.00005


def batch_seconds(n: int) -> float:
    return BASE_S + PER_ITEM_S * n


class Counters:
    """Batches run and seconds spent in them, since the server started."""

    def __init__(self) -> None:
        self.batches = 0
        self.busy_s = 0.0

    def record(self, started: float) -> dict[str, float]:
        now = time.monotonic()
        self.busy_s += now - started
        self.batches += 1
        return {"batches": self.batches, "busy_s": self.busy_s, "at_s": now}
