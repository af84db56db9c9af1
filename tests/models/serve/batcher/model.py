"""Dynamic batching: records each batch and answers each request with its own result."""

import sys
from pathlib import Path

from starlette.requests import Request

_KIT = str(Path(__file__).resolve().parent.parent / "_lib")
if _KIT not in sys.path:
    sys.path.insert(0, _KIT)

from e2e_model_kit import plain, record  # noqa: E402


class Model:
    def predict(self, batch, requests: Request):
        items = [plain(inputs) for inputs in batch]
        record(items[0]["tag"], "batch", size=len(items), xs=[p["x"] for p in items])
        return [
            {"y": p["x"] * 10, "header": r.headers.get("x-item"), "batch": len(items)}
            for p, r in zip(items, requests, strict=True)
        ]
