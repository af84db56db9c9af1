"""What pumping a request's choices costs per generated token, in process: one choice read
straight from its stream (the path ``server/openai/_generate.pieces`` had for ``n`` = 1 until
issue 25) against ``pieces`` itself (a task per choice and a bounded queue, for every ``n``).

    .venv/bin/python bench/openai_pieces.py [--tokens N] [--rounds R]

A fake data plane streams token ids (yielding to the loop every 16, as a step boundary) into a
real ``Choice`` with a small byte-level BPE (detokenizing and stop-string work included). Prints
microseconds per token for each path, best of the rounds. See bench/RESULTS.md (section 30).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from podium.openai import Sampling
from podium.runtime._stats import TokenStats
from podium.server.openai import _generate
from podium.server.openai._tokens import TextCodec


class _Version:
    name = "m"
    version = None

    def __init__(self) -> None:
        self.stats = type("Stats", (), {"tokens": TokenStats()})()


class _Plane:
    def __init__(self, tokens: int) -> None:
        self.tokens = tokens

    def stream(self, call: Any, mv: Any) -> Any:
        async def items() -> Any:
            for i in range(self.tokens):
                yield 70 + i % 20
                if i % 16 == 0:
                    await asyncio.sleep(0)

        return items()


def _codec() -> TextCodec:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=300, initial_alphabet=alphabet)
    tok.train_from_iterator(["hello world says hello"] * 20, trainer=trainer)
    return TextCodec(tok, "m")


async def _per_token(codec: TextCodec, tokens: int, direct: bool) -> float:
    sampling = Sampling([1], max_tokens=tokens + 1, ignore_eos=True)
    choice = _generate.Choice(sampling, codec, None, "m")
    plane, mv = _Plane(tokens), _Version()
    if direct:
        source = _generate._one(plane, mv, choice)  # type: ignore[arg-type]
    else:
        source = _generate.pieces(plane, mv, [choice], 1)  # type: ignore[arg-type]
    start = time.perf_counter()
    async for _ in source:
        pass
    return (time.perf_counter() - start) / tokens * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    codec = _codec()
    for name, direct in (("one choice read directly", True), ("pieces (task + queue)", False)):
        best = min(asyncio.run(_per_token(codec, args.tokens, direct)) for _ in range(args.rounds))
        print(f"| {name} | {best:.1f} µs/token |")


if __name__ == "__main__":
    main()
