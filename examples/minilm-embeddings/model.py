"""all-MiniLM-L6-v2 sentence embeddings, dynamically batched (README.md beside this file).

In: ``text``, one sentence or several: OIP ``BYTES`` ``[n]``; on the Truss and TorchServe routes
JSON ``{"text": "..."}``, ``{"text": [...]}`` or ``{"texts": [...]}``. Out: ``embedding``, FP32
``[n, 384]``, each row L2-normalized (cosine similarity is a dot product).

OpenAI's ``POST /v1/embeddings`` reaches :meth:`Model.embed` through the same dynamic batches
(docs/openai.md); ``self.tokenizer`` counts its usage and decodes token-id inputs.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

import podium
from podium import InvalidInput


def _sibling(name: str) -> Any:
    """``name``.py from this directory (Podium imports a model's file by path, not as a package)."""
    key = f"podium_example_minilm_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, Path(__file__).with_name(f"{name}.py"))
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import {name}.py beside {__file__}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


embedder = _sibling("embedder")

#: torch's intra-op threads: 1 (README.md beside this file, "Threads, batching, concurrency":
#: more threads than free cores only contend, and collapse on a shared machine).
THREADS = int(os.environ.get("MINILM_TORCH_THREADS", "1"))


def _sentences(inputs: Any) -> list[str]:
    """The request's sentences, whichever route it came by."""
    value = inputs
    if isinstance(inputs, dict):
        if "text" in inputs:
            value = inputs["text"]
        elif "texts" in inputs:
            value = inputs["texts"]
        else:
            raise InvalidInput(f"expected 'text' or 'texts', got the keys {sorted(inputs)}")
    if isinstance(value, (str, bytes)):
        value = [value]
    elif isinstance(value, np.ndarray):
        value = value.ravel().tolist()
    if not isinstance(value, list) or not value:
        raise InvalidInput("'text' must be a sentence or a non-empty list of sentences")
    sentences = []
    for item in value:
        if isinstance(item, bytes):
            try:
                item = item.decode("utf-8")
            except UnicodeDecodeError:
                raise InvalidInput("'text' must be UTF-8 text") from None
        if not isinstance(item, str):
            raise InvalidInput(f"'text' must hold strings, got {type(item).__name__}")
        sentences.append(item)
    return sentences


class Model:
    def __init__(self, config: dict[str, Any]) -> None:
        # with batch_size 1 (no batching), predict gets one request's inputs instead of a list
        self._batched = int(config.get("batch_size", 1)) > 1
        # the worker's device (docs/devices.md): a GPU when the server has one, else the CPU
        self._embedder = embedder.Embedder(threads=THREADS, device=podium.device())

    def load(self) -> None:
        self._embedder.load()
        self.tokenizer = self._embedder.tokenizer

    def embed(self, inputs: list[str]) -> Any:
        """OpenAI's embeddings: one row per text (the texts of a dynamic batch's calls)."""
        return self._embedder.embed(inputs)

    async def preprocess(self, inputs: Any) -> list[str]:
        # async: a few microseconds of checks, not worth a hop to the thread pool
        return _sentences(inputs)

    def predict(self, batch: Any) -> Any:
        requests: list[list[str]] = batch if self._batched else [batch]
        vectors = self._embedder.embed([s for sentences in requests for s in sentences])
        results, start = [], 0
        for sentences in requests:
            results.append({"embedding": vectors[start : start + len(sentences)]})
            start += len(sentences)
        return results if self._batched else results[0]
