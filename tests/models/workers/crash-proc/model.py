"""Process workers: records its pid, then waits for the gate file named in the request (the test
kills the worker meanwhile); without a gate it answers at once."""

import os
import sys
from pathlib import Path

_KIT = str(Path(__file__).resolve().parents[2] / "serve" / "_lib")
if _KIT not in sys.path:
    sys.path.insert(0, _KIT)

from e2e_model_kit import record, wait_gate  # noqa: E402


class Model:
    def predict(self, inputs):
        tag = inputs.get("tag", "")
        record(tag, "started", pid=os.getpid())
        gate = inputs.get("gate")
        if gate:
            wait_gate(gate)
        record(tag, "finished", pid=os.getpid())
        return {"pid": os.getpid()}
