"""A tiny GPT-2 chat model on Podium's continuous batching (README.md beside this file).

A generative OpenAI model (docs/openai.md): ``load`` sets ``self.tokenizer`` (GPT-2's byte-level
BPE, with a chat template) and ``self.context_length``; Podium tokenizes each request, makes one
``podium.openai.Sampling`` per choice, and ``step`` advances every running choice by one token in
one batched forward pass with a KV cache (engine.py).

    curl -s localhost:8080/v1/chat/completions -H 'content-type: application/json' \\
      -d '{"model": "chat-gpt2-tiny", "messages": [{"role": "user", "content": "Hi"}],
           "max_tokens": 8, "temperature": 0}'

The weights are random (from a fixed seed), made and saved in ``data/`` on the first load: the
text is gibberish, but it is a real transformer run the real way, and greedy decoding is
deterministic.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from podium import Generation


def _sibling(name: str) -> Any:
    """``name``.py from this directory (Podium imports a model's file by path, not as a package)."""
    key = f"podium_example_gpt2_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, Path(__file__).with_name(f"{name}.py"))
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import {name}.py beside {__file__}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


#: torch's intra-op threads: 1 by default (a step's many small operations gain nothing from more
#: threads on a busy machine, and each operation then waits for the slowest thread).
THREADS = int(os.environ.get("GPT2_TINY_TORCH_THREADS", "1"))


class Model:
    def __init__(self, data_dir: Path) -> None:  # this folder's data/: the saved weights
        self._weights = Path(data_dir) / "gpt2-tiny"
        self.engine: Any = None
        self.tokenizer: Any = None
        self.context_length = 0

    def load(self) -> None:
        self.engine = _sibling("engine").Engine(self._weights, threads=THREADS)
        self.tokenizer = self.engine.tokenizer
        self.context_length = self.engine.context_length

    def step(self, batch: list[Generation]) -> None:
        self.engine.step(batch)
