"""examples/chat-gpt2-tiny, the model alone (no server): GPT-2's real tokenizer, greedy decoding
that is deterministic and equal to a full forward pass without a cache, a batched step that gives
every generation what it gets alone (whoever joins, leaves or sits out a step), one forward pass
per step for the whole batch, and the sampling parameters of podium.openai.Sampling.

The libraries come from the extra ``examples`` (``python3 dev.py test`` installs it); where they
are missing the tests are skipped, saying so.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from conftest import EXAMPLES

from podium import Generation
from podium.openai import PromptLogprobs, Sampling, Token

pytestmark = pytest.mark.slow  # loads torch and transformers: seconds, not milliseconds

torch = pytest.importorskip("torch", reason="the extra 'examples' (torch) is not installed")
pytest.importorskip("transformers", reason="the extra 'examples' (transformers) is not installed")

EXAMPLE = EXAMPLES / "chat-gpt2-tiny"
PROMPTS = [
    "Hello there",
    "The quick brown fox jumps over the lazy dog and",
    "A",
    "Once upon a time, in a land far away, there lived a",
]


@pytest.fixture(scope="module")
def engine_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpt2_tiny_engine_test", EXAMPLE / "engine.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def engine(engine_module: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Any:
    return engine_module.Engine(tmp_path_factory.mktemp("weights") / "gpt2-tiny", threads=1)


def ids(engine: Any, text: str) -> list[int]:
    return list(engine.tokenizer(text).input_ids)


def generation(engine: Any, prompt: str, **fields: Any) -> Generation:
    fields.setdefault("max_tokens", 12)
    fields.setdefault("temperature", 0.0)
    return Generation(Sampling(prompt_token_ids=ids(engine, prompt), **fields))


def run(engine: Any, pending: list[Generation], join_every: int = 0) -> dict[int, list[Any]]:
    """Step ``pending`` to the end as Podium's scheduler does: all at once, or (``join_every``)
    one more generation joining the running batch every that many steps. Each one's items."""
    out: dict[int, list[Any]] = {id(g): [] for g in pending}
    waiting, active, step = list(pending), list[Generation](), 0
    while waiting or active:
        if waiting and not join_every:
            active, waiting = active + waiting, []
        elif waiting and step % join_every == 0:
            active.append(waiting.pop(0))
        engine.step(active)
        for g in active:
            out[id(g)] += g.take()
            g.first = False
        active = [g for g in active if not g.finished]
        step += 1
    return out


def tokens(items: list[Any]) -> list[int]:
    return [
        item.id if isinstance(item, Token) else item
        for item in items
        if not isinstance(item, PromptLogprobs)
    ]


def alone(engine: Any, prompt: str, **fields: Any) -> list[int]:
    g = generation(engine, prompt, **fields)
    return tokens(run(engine, [g])[id(g)])


# -- the tokenizer ----------------------------------------------------------------------------


def test_the_tokenizer_is_gpt2s_byte_level_bpe(engine: Any) -> None:
    tokenizer = engine.tokenizer
    assert ids(engine, "Hello world") == [15496, 995]  # GPT-2's ids for these two words
    assert tokenizer.eos_token == "<|endoftext|>" and tokenizer.eos_token_id == 50256
    text = "Ünïcödé — and an emoji 🙂!"
    assert tokenizer.decode(ids(engine, text)) == text  # byte level: every string round-trips
    chat = tokenizer.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert chat == "system: Be brief.\nuser: Hi\nassistant:"
    assert engine.context_length == 1024


# -- greedy decoding, the cache, batching -----------------------------------------------------


def test_greedy_decoding_is_deterministic_and_equals_a_full_forward(engine: Any) -> None:
    prompt = ids(engine, PROMPTS[1])
    got = alone(engine, PROMPTS[1], max_tokens=10)
    assert got == alone(engine, PROMPTS[1], max_tokens=10)
    sequence = list(prompt)
    with torch.inference_mode():
        for _ in range(10):  # no cache: the whole sequence again for every token
            logits = engine.model(torch.tensor([sequence])).logits[0, -1]
            sequence.append(int(torch.argmax(logits)))
    assert got == sequence[len(prompt) :]


def test_the_kv_cache_gives_the_logprobs_of_a_full_forward(engine: Any) -> None:
    g = generation(engine, PROMPTS[3], max_tokens=8, logprobs=3)
    items = run(engine, [g])[id(g)]
    assert all(isinstance(item, Token) for item in items) and len(items) == 8
    prompt = ids(engine, PROMPTS[3])
    with torch.inference_mode():
        logits = engine.model(torch.tensor([prompt + [t.id for t in items]])).logits[0]
    full = torch.log_softmax(logits.float(), dim=-1)
    for i, token in enumerate(items):
        row = full[len(prompt) - 1 + i]
        assert token.logprob == pytest.approx(float(row[token.id]), abs=1e-4)
        assert token.top_logprobs is not None and len(token.top_logprobs) == 3
        best = torch.topk(row, 3).indices.tolist()
        assert list(token.top_logprobs) == best  # most likely first
        assert token.logprob <= max(token.top_logprobs.values()) + 1e-6


def test_a_batch_gives_each_generation_what_it_gets_alone(engine: Any) -> None:
    singles = [alone(engine, p) for p in PROMPTS]
    together = [generation(engine, p) for p in PROMPTS]
    got = run(engine, together)
    assert [tokens(got[id(g)]) for g in together] == singles
    staggered = [generation(engine, p, max_tokens=12 - i) for i, p in enumerate(PROMPTS)]
    got = run(engine, staggered, join_every=3)  # joins mid-run, leaves at different steps
    assert [tokens(got[id(g)]) for g in staggered] == [s[: 12 - i] for i, s in enumerate(singles)]


def test_a_generation_that_sits_out_steps_resumes_where_it_was(engine: Any) -> None:
    """Podium leaves a generation whose reader is slow out of some steps (back-pressure)."""
    singles = [alone(engine, p) for p in PROMPTS[:3]]
    gens = [generation(engine, p) for p in PROMPTS[:3]]
    out: dict[int, list[int]] = {id(g): [] for g in gens}
    step = 0
    while any(not g.finished for g in gens):
        stepping = [g for i, g in enumerate(gens) if not g.finished and (i != 1 or step % 3 == 0)]
        engine.step(stepping)
        for g in stepping:
            out[id(g)] += tokens(g.take())
        step += 1
    assert [out[id(g)] for g in gens] == singles


def test_one_forward_pass_per_step_for_the_whole_batch(engine: Any) -> None:
    gens = [generation(engine, p, max_tokens=6) for p in PROMPTS * 4]  # 16 at once
    before = engine.steps
    run(engine, gens)
    assert engine.steps - before == 6  # one prefill pass, then five decode passes: not 16 x 6


# -- prompt logprobs, stopping --------------------------------------------------------------


def test_prompt_logprobs_come_first_and_equal_a_full_forward(engine: Any) -> None:
    prompt = ids(engine, PROMPTS[1])
    g = generation(engine, PROMPTS[1], max_tokens=2, prompt_logprobs=2)
    items = run(engine, [g])[id(g)]
    first = items[0]
    assert isinstance(first, PromptLogprobs) and len(tokens(items)) == 2
    assert len(first.logprobs) == len(prompt) and first.logprobs[0] is None
    assert first.top_logprobs is not None and first.top_logprobs[0] is None
    with torch.inference_mode():
        full = torch.log_softmax(engine.model(torch.tensor([prompt])).logits[0].float(), -1)
    for i in range(1, len(prompt)):
        assert first.logprobs[i] == pytest.approx(float(full[i - 1, prompt[i]]), abs=1e-4)
        assert len(first.top_logprobs[i] or {}) == 2


def test_max_tokens_zero_gives_the_prompt_logprobs_only(engine: Any) -> None:
    g = generation(engine, PROMPTS[0], max_tokens=0, prompt_logprobs=0)
    items = run(engine, [g])[id(g)]
    assert len(items) == 1 and isinstance(items[0], PromptLogprobs) and g.finished
    assert items[0].top_logprobs is None


def test_stop_token_ids_end_a_generation_and_eos_unless_ignored(engine: Any) -> None:
    free = alone(engine, PROMPTS[2], max_tokens=8)
    stop = free[3]
    assert (
        alone(engine, PROMPTS[2], max_tokens=8, stop_token_ids=[stop])
        == free[: free.index(stop) + 1]
    )
    # the tokenizer's EOS as the first choice: a bias on its logit, through a wrapped model
    eos = engine.eos

    class EosFirst(torch.nn.Module):  # type: ignore[name-defined]
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, **kwargs: Any) -> Any:
            out = self.inner(**kwargs)
            out.logits[..., eos] += 1000.0
            return out

    inner = engine.model
    engine.model = EosFirst(inner)
    try:
        assert alone(engine, PROMPTS[2], max_tokens=5) == [eos]
        assert alone(engine, PROMPTS[2], max_tokens=5, ignore_eos=True) == [eos] * 5
    finally:
        engine.model = inner


def test_a_prompt_as_long_as_the_context_is_refused(engine: Any) -> None:
    g = Generation(Sampling(prompt_token_ids=[11] * engine.context_length, max_tokens=1))
    with pytest.raises(ValueError, match="context"):
        engine.step([g])


# -- sampling ---------------------------------------------------------------------------------


def test_a_seed_repeats_a_sample_and_each_choice_differs(engine: Any) -> None:
    first = alone(engine, PROMPTS[0], temperature=1.0, seed=7)
    assert first == alone(engine, PROMPTS[0], temperature=1.0, seed=7)
    assert first != alone(engine, PROMPTS[0], temperature=1.0, seed=7, index=1)
    assert first != alone(engine, PROMPTS[0], temperature=1.0, seed=8)
    # in a batch with others, a seeded choice draws the same tokens as alone
    gens = [generation(engine, p, temperature=1.0, seed=7) for p in PROMPTS]
    got = run(engine, gens)
    assert tokens(got[id(gens[0])]) == first


@pytest.mark.parametrize("vocab", [50257, 1000, 997])  # blocks without padding, and with
def test_the_two_level_draw_is_inverse_transform_sampling(
    engine_module: ModuleType, vocab: int
) -> None:
    generator = torch.Generator().manual_seed(0)
    weights = torch.softmax(torch.randn(4, vocab, generator=generator) * 3, dim=-1) * 7
    weights[3, vocab // 2 :] = 0  # a row with masked tokens (top-k / top-p)
    rows = weights.repeat(500, 1)
    draws = torch.rand(len(rows), generator=generator)
    got = torch.tensor(engine_module._draw(rows, draws))
    cumulative = rows.double().cumsum(-1)  # the reference: a full float64 cumulative sum
    want = torch.searchsorted(cumulative, (draws.double() * cumulative[:, -1]).unsqueeze(1))
    assert float((got == want.squeeze(1)).float().mean()) > 0.995  # float32 rounding only
    assert int((got.view(500, 4)[:, 3] >= vocab // 2).sum()) == 0  # never a masked token


def test_top_k_1_and_a_tiny_top_p_are_greedy(engine: Any) -> None:
    greedy = alone(engine, PROMPTS[3])
    assert alone(engine, PROMPTS[3], temperature=1.5, top_k=1, seed=1) == greedy
    assert alone(engine, PROMPTS[3], temperature=1.5, top_p=1e-6, seed=1) == greedy


def test_top_k_keeps_the_sample_among_the_k_most_likely(engine: Any) -> None:
    g = generation(engine, PROMPTS[1], temperature=5.0, top_k=3, seed=3, logprobs=3, max_tokens=10)
    for token in run(engine, [g])[id(g)]:
        assert token.top_logprobs is not None and token.id in token.top_logprobs


def test_penalties_push_repeated_tokens_down(engine: Any) -> None:
    greedy = alone(engine, PROMPTS[0], max_tokens=10)
    assert len(set(greedy)) < len(greedy)  # the untrained model repeats itself
    for penalty in ({"frequency_penalty": 2.0}, {"presence_penalty": 2.0}):
        varied = alone(engine, PROMPTS[0], max_tokens=10, **penalty)
        assert len(set(varied)) == len(varied), penalty


def test_the_weights_are_made_once_and_reloaded(engine_module: ModuleType, tmp_path: Path) -> None:
    weights = tmp_path / "gpt2-tiny"
    first = engine_module.Engine(weights, threads=1)
    made = (weights / "config.json").stat().st_mtime_ns
    again = engine_module.Engine(weights, threads=1)
    assert (weights / "config.json").stat().st_mtime_ns == made
    for a, b in zip(first.model.parameters(), again.model.parameters(), strict=True):
        assert torch.equal(a, b)
