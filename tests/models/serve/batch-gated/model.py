"""Batching with a bounded queue: a batch holds the only slot until the test opens its gate."""

import sys
from pathlib import Path

_KIT = str(Path(__file__).resolve().parent.parent / "_lib")
if _KIT not in sys.path:
    sys.path.insert(0, _KIT)

from e2e_model_kit import plain, record, wait_gate  # noqa: E402


class Model:
    def preprocess(self, inputs):
        p = plain(inputs)
        record(p["tag"], "queued", i=p["i"])
        return p

    def predict(self, batch):
        record(batch[0]["tag"], "batch", items=[p["i"] for p in batch])
        for p in batch:
            if p.get("gate") and not wait_gate(p["gate"]):
                record(p["tag"], "gate-timeout")
        return [{"i": p["i"]} for p in batch]
