"""A sync predict that holds its only slot until the test opens a gate (a file)."""

import sys
from pathlib import Path

_KIT = str(Path(__file__).resolve().parent.parent / "_lib")
if _KIT not in sys.path:
    sys.path.insert(0, _KIT)

from e2e_model_kit import plain, record, wait_gate  # noqa: E402


class Model:
    def preprocess(self, inputs):
        p = plain(inputs)
        record(p["tag"], "preprocess")
        return p

    def predict(self, p):
        tag = p["tag"]
        record(tag, "predict-start")
        gate = p.get("gate")
        if gate and not wait_gate(gate):
            record(tag, "gate-timeout")
        record(tag, "predict-end")
        return {"tag": tag}
