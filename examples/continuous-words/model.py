"""A native continuous-batching generator: each request asks for ``n`` words; every step
advances every active request by one word (one batched step, as a language model's decoder
does), requests join the running batch between steps and leave when they are done.

    curl -sN localhost:8080/v1/models/continuous-words:predict -d '{"n": 5}'

Several clients at once share the steps: a request that arrives mid-run joins at the next step
instead of waiting for the batch to finish.
"""

import asyncio

from podium import Generation

WORDS = "the quick brown fox jumps over the lazy dog".split()
STEP_S = 0.05  # the cost of one batched step


def _count(value) -> int:
    """``n`` as JSON gives it, or as an OIP tensor's single element."""
    value = value.tolist() if hasattr(value, "tolist") else value
    while isinstance(value, list):
        value = value[0]
    return int(value)


class Model:
    async def step(self, batch: list[Generation]) -> None:
        await asyncio.sleep(STEP_S)
        for g in batch:
            i = g.state.get("i", 0)
            g.emit(WORDS[i % len(WORDS)] + " ")
            g.state["i"] = i + 1
            if i + 1 >= _count(g.inputs.get("n", 5)):
                g.finish()
