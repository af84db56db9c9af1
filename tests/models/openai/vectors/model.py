"""A test model that embeds (``embed``) and predicts: each text's vector is its length, its
count of vowels and 1, normalized; every embed call is logged (PODIUM_E2E_EVENTS) with how many
texts it got, so tests see dynamic batching join calls."""

import json
import os

import numpy as np


class Model:
    def embed(self, texts: list[str]) -> np.ndarray:
        path = os.environ.get("PODIUM_E2E_EVENTS")
        if path:
            with open(path, "a") as f:
                f.write(json.dumps({"tag": "embed", "event": "call", "n": len(texts)}) + "\n")
        rows = np.array(
            [[len(t), sum(c in "aeiou" for c in t), 1.0] for t in texts], dtype=np.float32
        )
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)

    def predict(self, batch):
        return [{"echo": item} for item in batch]
