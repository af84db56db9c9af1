"""The assertions of vLLM's OpenAI server tests (``tests/entrypoints/openai``: completion/
test_completion.py, chat_completion/test_chat.py, the error tests), ported to run against a real
``podium serve examples/chat-gpt2-tiny`` with the real ``openai`` client.

What carries over unchanged: usage sums, ``finish_reason`` only in the last chunk, the first
delta's role, streamed text equal to the non-streamed text at temperature 0, ``n`` choices
(indexed, distinct when sampled, interleaved when streamed), logprobs counts, the
``stream_options`` rules, token-id prompts, echo with logprobs, and a server that keeps working
after each refused request. What does not: LoRA, beam search, structured outputs and vLLM's own
``prompt_logprobs`` field (not OpenAI's; ``echo`` + ``logprobs`` is the OpenAI way, tested here);
"choices finish at different times" needs a model that ends on its own (this one, untrained,
almost never samples EOS). OpenAI's own limit of 5 completion logprobs replaces vLLM's 20.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from conftest import EXAMPLES, Server, run_server

pytestmark = pytest.mark.slow  # loads torch and a real model: seconds, not milliseconds

openai = pytest.importorskip("openai", reason="the 'openai' client is not installed")
pytest.importorskip("torch", reason="the extra 'examples' (torch) is not installed")
pytest.importorskip("transformers", reason="the extra 'examples' (transformers) is not installed")

EXAMPLE = EXAMPLES / "chat-gpt2-tiny"
MODEL = "chat-gpt2-tiny"
MESSAGES = [
    {"role": "system", "content": "you are a helpful assistant"},
    {"role": "user", "content": "what is 1+1?"},
]


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with run_server(EXAMPLE, env={"GPT2_TINY_TORCH_THREADS": "1"}, timeout=300) as started:
        yield started


@pytest.fixture(scope="module")
def client(server: Server) -> Iterator[Any]:
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0) as made:
        yield made


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpt2_tiny_engine_vllm", EXAMPLE / "engine.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build_tokenizer()


def still_serving(client: Any) -> None:
    """vLLM's "the server should still work afterwards"."""
    # (seeded: drawn at random, this tiny model's EOS can come within five tokens)
    done = client.completions.create(model=MODEL, prompt=[0, 0, 0, 0, 0], max_tokens=5, seed=7)
    assert done.choices[0].finish_reason == "length" and done.usage.completion_tokens == 5


# -- completions (completion/test_completion.py) ------------------------------------------------


def test_single_completion(client: Any, tokenizer: Any) -> None:
    prompt = "Hello, my name is"
    done = client.completions.create(model=MODEL, prompt=prompt, max_tokens=5, temperature=0.0)
    assert done.id is not None and len(done.choices) == 1
    choice = done.choices[0]
    assert len(choice.text) >= 5 and choice.finish_reason == "length"
    assert done.usage.completion_tokens == 5
    assert done.usage.prompt_tokens == len(tokenizer(prompt).input_ids)
    assert done.usage.total_tokens == done.usage.prompt_tokens + 5
    # token ids as the prompt
    done = client.completions.create(
        model=MODEL, prompt=[0, 0, 0, 0, 0], max_tokens=5, temperature=0.0
    )
    assert len(done.choices[0].text) >= 1 and done.usage.prompt_tokens == 5


@pytest.mark.parametrize("logprobs", [None, 0, 5])
def test_completion_logprobs_counts(client: Any, logprobs: int | None) -> None:
    done = client.completions.create(
        model=MODEL, prompt=[0, 0, 0, 0, 0], max_tokens=5, temperature=0.0, logprobs=logprobs
    )
    got = done.choices[0].logprobs
    if logprobs is None:
        assert got is None
        return
    assert got.token_logprobs is not None and len(got.token_logprobs) == 5
    assert got.top_logprobs is not None and len(got.top_logprobs) == 5
    for top in got.top_logprobs:  # the k most likely, and the chosen one if not among them
        assert max(logprobs, 1) <= len(top) <= logprobs + 1


def test_too_many_completion_logprobs(client: Any) -> None:
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=MODEL, prompt=[0, 0, 0, 0, 0], max_tokens=5, logprobs=21)
    with pytest.raises(openai.BadRequestError):
        stream = client.completions.create(
            model=MODEL, prompt=[0, 0, 0, 0, 0], max_tokens=5, logprobs=30, stream=True
        )
        for _ in stream:
            pass
    still_serving(client)


def test_completion_streaming(client: Any) -> None:
    prompt = "What is an LLM?"
    single = client.completions.create(model=MODEL, prompt=prompt, max_tokens=5, temperature=0.0)
    chunks, finish_reasons = [], 0
    for chunk in client.completions.create(
        model=MODEL, prompt=prompt, max_tokens=5, temperature=0.0, stream=True
    ):
        chunks.append(chunk.choices[0].text)
        finish_reasons += chunk.choices[0].finish_reason is not None
    assert finish_reasons == 1  # only in the last chunk
    assert chunk.choices[0].finish_reason == "length" and chunk.choices[0].text
    assert "".join(chunks) == single.choices[0].text


def test_parallel_no_streaming(client: Any) -> None:
    n = 3
    done = client.completions.create(
        model=MODEL,
        prompt="What is an LLM?",
        max_tokens=50,
        n=n,
        temperature=1.0,
        logprobs=0,
        seed=42,
    )
    assert len(done.choices) == n
    for index, choice in enumerate(done.choices):
        assert choice.index == index and choice.finish_reason is not None
        assert len(choice.logprobs.tokens) <= 50
    assert len({choice.text for choice in done.choices}) == n  # n distinct samples
    assert done.usage.completion_tokens == sum(len(c.logprobs.tokens) for c in done.choices)


def test_parallel_streaming_interleaves_the_choices(client: Any) -> None:
    n, max_tokens = 3, 50
    chunks: list[list[str]] = [[] for _ in range(n)]
    order: list[int] = []
    finish_reasons = 0
    for chunk in client.completions.create(
        model=MODEL,
        prompt="What is an LLM?",
        max_tokens=max_tokens,
        n=n,
        temperature=1.0,
        stream=True,
        seed=42,
    ):
        index = chunk.choices[0].index
        chunks[index].append(chunk.choices[0].text)
        order.append(index)
        finish_reasons += chunk.choices[0].finish_reason is not None
    assert finish_reasons == n
    assert all(len(c) <= max_tokens for c in chunks)
    assert len({"".join(c) for c in chunks}) == n
    # interleaved: every choice has streamed something before the first one is done
    assert set(order[: 2 * n]) == set(range(n))


def test_completion_stream_options(client: Any) -> None:
    def stream(**options: Any) -> list[Any]:
        return list(
            client.completions.create(
                model=MODEL,
                prompt="What is the capital of France?",
                max_tokens=5,
                temperature=0.0,
                stream=True,
                **options,
            )
        )

    unused: list[dict[str, Any]] = [
        {"stream_options": {"include_usage": False, "continuous_usage_stats": False}},
        {"stream_options": {"include_usage": False, "continuous_usage_stats": True}},
        {"stream_options": {}},
        {},
    ]
    for fields in unused:
        assert all(chunk.usage is None for chunk in stream(**fields)), fields
    got = stream(stream_options={"include_usage": True, "continuous_usage_stats": False})
    *body, final = got
    assert all(chunk.usage is None for chunk in body)
    assert body[-1].choices[0].finish_reason is not None
    assert final.choices == [] and final.usage.completion_tokens == 5
    assert final.usage.total_tokens == final.usage.prompt_tokens + final.usage.completion_tokens
    got = stream(stream_options={"include_usage": True, "continuous_usage_stats": True})
    for chunk in got:
        assert chunk.usage is not None and chunk.usage.prompt_tokens > 0
        assert chunk.usage.completion_tokens > 0
        assert chunk.usage.total_tokens == chunk.usage.prompt_tokens + chunk.usage.completion_tokens
    assert got[-1].choices == [] and got[-1].usage.completion_tokens == 5
    misplaced: list[dict[str, Any]] = [
        {"include_usage": None},
        {"include_usage": True},
        {"continuous_usage_stats": None},
        {"continuous_usage_stats": True},
    ]
    for options in misplaced:
        with pytest.raises(openai.BadRequestError):  # stream_options without stream
            client.completions.create(
                model=MODEL, prompt="Hi", max_tokens=5, stream=False, stream_options=options
            )
    still_serving(client)


@pytest.mark.parametrize("prompts", [["Hello, my name is"] * 2, [[0, 0, 0, 0, 0]] * 2])
def test_batch_completions(client: Any, prompts: list[Any]) -> None:
    done = client.completions.create(model=MODEL, prompt=prompts, max_tokens=5, temperature=0.0)
    assert len(done.choices) == 2 and done.choices[0].text == done.choices[1].text
    assert [c.index for c in done.choices] == [0, 1]
    done = client.completions.create(
        model=MODEL, prompt=prompts, n=2, max_tokens=5, temperature=0.0
    )
    assert len(done.choices) == 4 and [c.index for c in done.choices] == [0, 1, 2, 3]
    assert len({c.text for c in done.choices}) == 1  # greedy: the same text four times
    texts = ["", ""]
    for chunk in client.completions.create(
        model=MODEL, prompt=prompts, max_tokens=5, temperature=0.0, stream=True
    ):
        assert len(chunk.choices) == 1
        texts[chunk.choices[0].index] += chunk.choices[0].text
    assert texts[0] == texts[1] == done.choices[0].text


@pytest.mark.parametrize("logprobs", [1, 0])
@pytest.mark.parametrize("prompt", ["Hello, my name is", [0, 0, 0, 0, 0]])
def test_echo_logprob_completion(client: Any, tokenizer: Any, logprobs: int, prompt: Any) -> None:
    done = client.completions.create(
        model=MODEL, prompt=prompt, max_tokens=5, temperature=0.0, echo=True, logprobs=logprobs
    )
    text = tokenizer.decode(prompt) if isinstance(prompt, list) else prompt
    assert done.choices[0].text.startswith(text)
    got = done.choices[0].logprobs
    prompt_tokens = done.usage.prompt_tokens
    assert len(got.tokens) == len(got.text_offset) == prompt_tokens + 5
    assert len(got.token_logprobs) == prompt_tokens + 5 and got.token_logprobs[0] is None
    assert len(got.top_logprobs) == prompt_tokens + 5 and got.top_logprobs[0] is None
    for top in got.top_logprobs[1:]:
        assert max(logprobs, 1) <= len(top) <= logprobs + 1


def test_echo_with_max_tokens_0_scores_the_prompt(client: Any) -> None:
    """What lm-eval's ``local-completions`` sends for loglikelihood tasks."""
    done = client.completions.create(
        model=MODEL, prompt="The cat sat on the mat", max_tokens=0, echo=True, logprobs=1
    )
    got = done.choices[0].logprobs
    assert done.choices[0].text == "The cat sat on the mat"
    assert done.usage.completion_tokens == 0 and len(got.tokens) == done.usage.prompt_tokens
    assert got.token_logprobs[0] is None and all(lp < 0 for lp in got.token_logprobs[1:])


def test_stop_strings_trim_and_end_with_stop(client: Any) -> None:
    prompt = "Once upon a time"
    free = client.completions.create(model=MODEL, prompt=prompt, max_tokens=12, temperature=0.0)
    text = free.choices[0].text
    cut = text[3:6]  # three characters, likely across a token boundary
    done = client.completions.create(
        model=MODEL, prompt=prompt, max_tokens=12, temperature=0.0, stop=[cut]
    )
    assert done.choices[0].text == text[: text.index(cut)]
    assert done.choices[0].finish_reason == "stop"
    streamed = "".join(
        chunk.choices[0].text
        for chunk in client.completions.create(
            model=MODEL, prompt=prompt, max_tokens=12, temperature=0.0, stop=cut, stream=True
        )
    )
    assert streamed == done.choices[0].text


# -- chat (chat_completion/test_chat.py) ------------------------------------------------------


def test_no_logprobs_chat(client: Any) -> None:
    done = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_completion_tokens=5, temperature=0.0, logprobs=False
    )
    assert done.choices[0].logprobs is None


@pytest.mark.parametrize("top", [0, 5])
def test_logprobs_chat_counts(client: Any, top: int) -> None:
    done = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        max_completion_tokens=5,
        temperature=0.0,
        logprobs=True,
        top_logprobs=top,
    )
    content = done.choices[0].logprobs.content
    assert content is not None and len(content) == 5
    assert all(len(entry.top_logprobs) == top for entry in content)


def test_too_many_chat_logprobs(client: Any) -> None:
    with pytest.raises(openai.BadRequestError):
        stream = client.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            max_completion_tokens=10,
            logprobs=True,
            top_logprobs=21,
            stream=True,
        )
        for _ in stream:
            pass
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model=MODEL, messages=MESSAGES, max_completion_tokens=10, logprobs=True, top_logprobs=30
        )
    done = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_completion_tokens=10)
    assert done.choices[0].message.content is not None


def test_single_chat_session(client: Any, tokenizer: Any) -> None:
    messages = list(MESSAGES)
    # a fixed seed: drawn at random, this tiny model's EOS now and then comes within five tokens
    # (finish "stop", not the "length" vLLM's real model always gives)
    done = client.chat.completions.create(
        model=MODEL,
        messages=messages,
        max_completion_tokens=5,
        logprobs=True,
        top_logprobs=5,
        seed=7,
    )
    assert done.id is not None and len(done.choices) == 1
    choice = done.choices[0]
    assert choice.finish_reason == "length"
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    prompt = tokenizer(text, add_special_tokens=False).input_ids
    assert done.usage == openai.types.CompletionUsage(
        completion_tokens=5, prompt_tokens=len(prompt), total_tokens=len(prompt) + 5
    )
    assert choice.message.role == "assistant" and choice.message.content is not None
    messages.append({"role": "assistant", "content": choice.message.content})
    messages.append({"role": "user", "content": "express your result in json"})
    done = client.chat.completions.create(model=MODEL, messages=messages, max_completion_tokens=5)
    assert done.choices[0].message.content is not None


def test_chat_streaming(client: Any) -> None:
    single = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_completion_tokens=10, temperature=0.0
    )
    chunks: list[str] = []
    roles: list[str] = []
    finish_reasons = 0
    for chunk in client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_completion_tokens=10, temperature=0.0, stream=True
    ):
        delta = chunk.choices[0].delta
        if delta.role:
            roles.append(delta.role)
        if delta.content:
            chunks.append(delta.content)
        finish_reasons += chunk.choices[0].finish_reason is not None
    assert roles == ["assistant"]  # once, in the first delta
    assert finish_reasons == 1 and chunk.choices[0].finish_reason == single.choices[0].finish_reason
    assert delta.content
    assert "".join(chunks) == single.choices[0].message.content


def test_chat_completion_stream_options(client: Any) -> None:
    def stream(**fields: Any) -> list[Any]:
        return list(
            client.chat.completions.create(
                model=MODEL,
                messages=MESSAGES,
                max_completion_tokens=10,
                temperature=0.0,
                stream=True,
                **fields,
            )
        )

    assert all(c.usage is None for c in stream(stream_options={"include_usage": False}))
    *body, final = stream(stream_options={"include_usage": True, "continuous_usage_stats": False})
    assert all(c.usage is None for c in body) and body[-1].choices[0].finish_reason is not None
    assert final.choices == [] and final.usage.completion_tokens == 10
    assert final.usage.total_tokens == final.usage.prompt_tokens + final.usage.completion_tokens
    for options in ({"include_usage": None}, {"include_usage": True}):
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(
                model=MODEL, messages=MESSAGES, max_completion_tokens=10, stream_options=options
            )


def test_chat_continuous_usage_stats_count_every_chunk(client: Any) -> None:
    """With ``continuous_usage_stats`` every chunk's ``completion_tokens`` rises (the role
    chunk counts 0), as vLLM's do."""
    last = 0
    for chunk in client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        max_completion_tokens=10,
        temperature=0.0,
        stream=True,
        stream_options={"include_usage": True, "continuous_usage_stats": True},
        extra_body={"min_tokens": 10},
    ):
        assert chunk.usage.prompt_tokens >= 0
        assert (
            last == 0
            or chunk.usage.completion_tokens > last
            or (not chunk.choices and chunk.usage.completion_tokens == last)
        )
        assert chunk.usage.total_tokens == chunk.usage.prompt_tokens + chunk.usage.completion_tokens
        last = chunk.usage.completion_tokens
    assert last == 10


def test_n_chat_choices_are_indexed_and_differ(client: Any) -> None:
    done = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_completion_tokens=8, n=3, temperature=1.0, seed=1
    )
    assert [c.index for c in done.choices] == [0, 1, 2]
    assert len({c.message.content for c in done.choices}) == 3
    assert done.usage.completion_tokens == 24


# -- concurrency: one batch, the same answers ---------------------------------------------------


def test_concurrent_requests_get_what_they_get_alone(server: Server, client: Any) -> None:
    prompts = [f"Request number {i} says" for i in range(8)]
    alone = [
        client.completions.create(model=MODEL, prompt=p, max_tokens=8, temperature=0.0)
        .choices[0]
        .text
        for p in prompts
    ]

    async def together() -> list[str]:
        async with openai.AsyncOpenAI(
            base_url=f"{server.url}/v1", api_key="unused", max_retries=0
        ) as aclient:
            answers = await asyncio.gather(
                *(
                    aclient.completions.create(model=MODEL, prompt=p, max_tokens=8, temperature=0.0)
                    for p in prompts
                )
            )
        return [a.choices[0].text for a in answers]

    assert asyncio.run(together()) == alone


# -- errors leave the server working (test_chat_error.py, test_completion_error.py) -----------


def test_bad_requests_are_400s_in_openais_shape_and_the_server_keeps_serving(
    server: Server, client: Any
) -> None:
    too_long = "hello " * 1100  # the model's context is 1024 tokens
    refused = [
        lambda: client.chat.completions.create(model=MODEL, messages=[]),
        lambda: client.chat.completions.create(
            model=MODEL, messages=[{"role": "wizard", "content": "hi"}]
        ),
        lambda: client.chat.completions.create(
            model=MODEL, messages=MESSAGES, max_completion_tokens=0
        ),
        lambda: client.chat.completions.create(model=MODEL, messages=MESSAGES, n=0),
        lambda: client.completions.create(model=MODEL, prompt=too_long, max_tokens=5),
        lambda: client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": too_long}]
        ),
        lambda: client.completions.create(
            model=MODEL, prompt="hi", max_tokens=5, extra_body={"temperature": "hot"}
        ),
    ]
    for call in refused:
        with pytest.raises(openai.BadRequestError) as info:
            call()
        assert set(info.value.body) >= {"message", "type", "param", "code"}
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model", messages=MESSAGES)
    raw = httpx.post(
        f"{server.url}/v1/chat/completions",
        content=b'{"model": "chat-gpt2-tiny", "messages": [',
        headers={"content-type": "application/json"},
    )
    assert raw.status_code == 400 and "error" in json.loads(raw.text)
    still_serving(client)


# -- the same model on OIP's generate routes ----------------------------------------------------


def test_oip_generate_gives_the_completion_text(server: Server, client: Any) -> None:
    """Not from vLLM: the model answers OIP ``generate`` / ``generate_stream`` too, with the text
    the completions route gives for the same prompt at temperature 0."""
    want = client.completions.create(model=MODEL, prompt="Hello", max_tokens=5, temperature=0.0)
    parameters = {"max_tokens": 5, "temperature": 0}
    body = {"text_input": "Hello", "parameters": parameters}
    got = httpx.post(f"{server.url}/v2/models/{MODEL}/generate", json=body, timeout=60)
    assert got.status_code == 200 and got.json()["text_output"] == want.choices[0].text
    with httpx.stream(
        "POST", f"{server.url}/v2/models/{MODEL}/generate_stream", json=body, timeout=60
    ) as streamed:
        events = [
            json.loads(line[6:])["text_output"]
            for line in streamed.iter_lines()
            if line.startswith("data: ")
        ]
    assert len(events) == 5 and "".join(events) == want.choices[0].text
