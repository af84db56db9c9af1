"""Proves overlap with barriers: preprocess waits until all n requests are inside preprocess,
predict until five predicts run at once. A barrier that is never filled times out (a 500)."""

import sys
import threading
from pathlib import Path

_KIT = str(Path(__file__).resolve().parent.parent / "_lib")
if _KIT not in sys.path:
    sys.path.insert(0, _KIT)

from e2e_model_kit import plain, record  # noqa: E402

_barriers = {}
_lock = threading.Lock()


def barrier(key, parties):
    with _lock:
        return _barriers.setdefault(key, threading.Barrier(parties, timeout=5))


class Model:
    def preprocess(self, inputs):
        p = plain(inputs)
        record(p["tag"], "pre-start", i=p["i"])
        barrier((p["tag"], "pre"), int(p["n"])).wait()
        record(p["tag"], "pre-end", i=p["i"])
        return p

    def predict(self, p):
        record(p["tag"], "predict-start", i=p["i"])
        barrier((p["tag"], "predict"), 5).wait()
        record(p["tag"], "predict-end", i=p["i"])
        return {"i": p["i"]}
