"""LitServe's OpenAI spec serving examples/chat-gpt2-tiny's own engine, for bench/openai.py.

    bench/.venvs/litserve/bin/python bench/litserve_gpt2.py PORT MAX_BATCH_SIZE BATCH_TIMEOUT_S

``POST /v1/chat/completions`` (LitServe's ``OpenAISpec``, streaming), the same chat template,
tokenizer, weights and ``Engine.step`` as the Podium model. With MAX_BATCH_SIZE above 1,
LitServe's own batching gathers requests that arrive together into one ``predict`` (a static
batch: it runs one ``Engine.step`` per token for the whole batch until every request of the
batch is done, and requests that arrive meanwhile wait for the next batch: LitServe's batched
streaming has no way to join a running batch). With 1, each request runs alone.

The choices ignore EOS (the benchmark asks for exactly ``max_tokens`` tokens, as it does of
Podium with ``ignore_eos``); ``temperature``, ``top_p`` and ``max_tokens`` come from the
request (LitServe's request type has no ``seed``, ``top_k`` or ``ignore_eos``).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import litserve as ls
from litserve.specs.openai import OpenAISpec

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "chat-gpt2-tiny"


def _engine_module() -> Any:
    spec = importlib.util.spec_from_file_location("gpt2_tiny_engine", EXAMPLE / "engine.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {EXAMPLE / 'engine.py'}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class _Sampling:
    """The fields of ``podium.openai.Sampling`` the engine reads (Podium is not installed here)."""

    prompt_token_ids: list[int]
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = True
    index: int = 0


class _Generation:
    """What ``Engine.step`` needs of one request (Podium's ``Generation`` has the same)."""

    def __init__(self, inputs: _Sampling) -> None:
        self.inputs = inputs
        self.state: dict[str, Any] = {}
        self.items: list[Any] = []
        self.finished = False
        self.ids: list[int] = []
        self.text = ""

    def emit(self, item: Any) -> None:
        self.items.append(item)

    def finish(self) -> None:
        self.finished = True


class GPT2Chat(ls.LitAPI):
    def setup(self, device: str) -> None:
        engine = _engine_module()
        weights = EXAMPLE / "data" / "gpt2-tiny"  # made by the Podium model's first load
        threads = int(os.environ.get("GPT2_TINY_TORCH_THREADS", "1"))  # as model.py reads it
        self.engine = engine.Engine(weights, threads=threads)

    def _sampling(self, request: Any) -> _Sampling:
        messages = [{"role": m.role, "content": m.content or ""} for m in request.messages]
        text = self.engine.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )
        return _Sampling(
            prompt_token_ids=list(self.engine.tokenizer(text, add_special_tokens=False).input_ids),
            max_tokens=int(request.max_completion_tokens or request.max_tokens or 16),
            temperature=float(request.temperature if request.temperature is not None else 1.0),
            top_p=float(request.top_p if request.top_p is not None else 1.0),
        )

    def _delta(self, g: _Generation) -> str:
        """The text the new tokens add (held back while it ends inside a UTF-8 character)."""
        g.ids += [item if isinstance(item, int) else item.id for item in g.items]
        g.items.clear()
        text = self.engine.tokenizer.decode(g.ids)
        if text.endswith("\ufffd"):
            return ""
        delta, g.text = text[len(g.text) :], text
        return delta

    def predict(self, x: Any) -> Any:
        batched = isinstance(x, list)
        gens = [_Generation(self._sampling(r)) for r in (x if batched else [x])]
        active = list(gens)
        while active:
            self.engine.step(active)
            deltas = [self._delta(g) for g in gens]
            active = [g for g in active if not g.finished]
            yield deltas if batched else deltas[0]

    def batch(self, inputs: list[Any]) -> list[Any]:
        return list(inputs)

    def unbatch(self, output: Any) -> Any:
        return output  # a generator of per-step lists, one delta per request

    def encode_response(self, output: Any) -> Any:
        for deltas in output:
            if isinstance(deltas, list):
                yield [{"role": "assistant", "content": d} for d in deltas]
            else:
                yield {"role": "assistant", "content": deltas}


def main() -> None:
    port, max_batch_size, batch_timeout = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    api = GPT2Chat(
        spec=OpenAISpec(), max_batch_size=max_batch_size, batch_timeout=batch_timeout, stream=True
    )
    server = ls.LitServer(api, accelerator="cpu", devices=1, workers_per_device=1, timeout=600)
    server.run(
        host="127.0.0.1",
        port=port,
        num_api_servers=1,
        log_level="warning",
        generate_client_file=False,
    )


if __name__ == "__main__":
    main()
