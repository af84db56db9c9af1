"""LitServe serving examples/minilm-embeddings' own Embedder, for bench/embeddings.py.

    bench/.venvs/litserve/bin/python bench/litserve_minilm.py PORT MAX_BATCH_SIZE BATCH_TIMEOUT_S

POST /predict with ``{"text": "a sentence"}`` answers ``{"embedding": [[384 floats]]}``, the
body Podium's Truss route gives for the same request. With MAX_BATCH_SIZE above 1, LitServe's
own dynamic batching gathers requests into one ``predict`` (its ``batch``/``unbatch``).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

import litserve as ls

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "minilm-embeddings"


def _embedder_module() -> Any:
    spec = importlib.util.spec_from_file_location("minilm_embedder", EXAMPLE / "embedder.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {EXAMPLE / 'embedder.py'}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class MiniLM(ls.LitAPI):
    def setup(self, device: str) -> None:
        embedder = _embedder_module()
        # the same threads as the Podium model (model.py reads the same variable)
        self.embedder = embedder.Embedder(
            threads=int(os.environ.get("MINILM_TORCH_THREADS", "1")), device=device
        )
        self.embedder.load()

    # no annotation on ``request``: LitServe builds its route from it, and an unannotated one
    # is the JSON body (a ``dict`` annotation would make it a query parameter)
    def decode_request(self, request):  # type: ignore[no-untyped-def]
        return str(request["text"])

    def batch(self, inputs: list[str]) -> list[str]:
        return inputs

    def predict(self, x: Any) -> Any:
        return self.embedder.embed(x if isinstance(x, list) else [x])

    def unbatch(self, output: Any) -> list[Any]:
        return [output[i : i + 1] for i in range(len(output))]

    def encode_response(self, output: Any) -> dict[str, Any]:
        return {"embedding": output.tolist()}


def main() -> None:
    port, max_batch_size, batch_timeout = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    api = MiniLM(max_batch_size=max_batch_size, batch_timeout=batch_timeout)
    # MINILM_ACCELERATOR=cuda: on the GPU (bench/gpu.py); the CPU otherwise (bench/embeddings.py)
    accelerator = os.environ.get("MINILM_ACCELERATOR", "cpu")
    server = ls.LitServer(
        api, accelerator=accelerator, devices=1, workers_per_device=1, timeout=120
    )
    server.run(
        host="127.0.0.1",
        port=port,
        num_api_servers=1,
        log_level="warning",
        generate_client_file=False,
    )


if __name__ == "__main__":
    main()
