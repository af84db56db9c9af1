"""A sync predict in a worker process: records its pid, waits for its request's gate."""

import os
import sys
from pathlib import Path

_KIT = str(Path(__file__).resolve().parents[2] / "serve" / "_lib")
if _KIT not in sys.path:
    sys.path.insert(0, _KIT)

from e2e_model_kit import plain, record, wait_gate  # noqa: E402


class Model:
    def predict(self, inputs):
        p = plain(inputs)
        tag = p["tag"]
        record(tag, "started", pid=os.getpid())
        opened = wait_gate(p["gate"], within=60)
        record(tag, "finished" if opened else "gate-timeout")
        return {"tag": tag}
