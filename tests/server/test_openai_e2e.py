"""OpenAI's API end to end: a real ``podium serve`` with the deterministic test model
(tests/models/openai/chars), an embedding model (vectors) and a truss defining Truss's OpenAI
methods, reached with the real ``openai`` client (sync, async, streaming, raw responses, its
exception classes) and raw httpx for the SSE framing. Assertions ported from vLLM's
``tests/entrypoints/openai`` where they apply."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import shutil
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anyio
import httpx
import numpy as np
import openai
import pytest
from conftest import TEST_MODELS, Server, run_server
from e2e_helpers import PATIENCE, EventLog
from openai_helpers import REPLY, chat, post_stream, sse_events, texts_by_choice

TRUSS = Path(__file__).parents[1] / "conformance/truss/trusses/upstream/test_openai"
MODELS = TEST_MODELS / "openai"


@pytest.fixture(scope="module")
def events_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("openai") / "events.jsonl"


@pytest.fixture(scope="module")
def server(events_file: Path) -> Iterator[Server]:
    env = {"PODIUM_E2E_EVENTS": str(events_file)}
    with run_server(
        MODELS / "chars", MODELS / "vectors", TRUSS, env=env, args=("--max-request-size", "65536")
    ) as running:
        yield running


@pytest.fixture
def http(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=PATIENCE) as c:
        yield c


@pytest.fixture
def sent(server: Server) -> list[httpx.Request]:
    return []


@pytest.fixture
def client(server: Server, sent: list[httpx.Request]) -> Iterator[openai.OpenAI]:
    hooks = {"request": [sent.append]}
    with httpx.Client(timeout=PATIENCE, event_hooks=hooks) as h:
        yield openai.OpenAI(base_url=server.url + "/v1", api_key="unused", http_client=h)


def truss_name(http: httpx.Client) -> str:
    r = http.post("/v2/repository/index", json={})
    names = [m["name"] for m in r.json() if m["name"] not in ("chars", "vectors")]
    assert len(names) == 1
    return names[0]


# -- models ------------------------------------------------------------------------------------


def test_models_lists_what_serves_openai_and_retrieve_does_not_clash_with_truss(
    client: openai.OpenAI, http: httpx.Client
) -> None:
    ids = [m.id for m in client.models.list()]
    assert ids == ["chars", "vectors"]
    got = client.models.retrieve("chars")
    assert got.id == "chars" and got.object == "model" and got.owned_by == "podium"
    # Truss's routes under /v1/models/ are untouched: readiness of a truss, its :predict
    name = truss_name(http)
    r = http.get(f"/v1/models/{name}")
    assert r.status_code == 200 and r.json() == {}
    r = http.post(f"/v1/models/{name}:predict", json={})
    assert r.status_code == 200 and r.json() == "predict"
    with pytest.raises(openai.NotFoundError) as caught:
        client.models.retrieve("nope")
    assert caught.value.body["code"] == "model_not_found"  # type: ignore[index]


def test_truss_methods_answer_for_the_truss_and_podium_for_the_others(http: httpx.Client) -> None:
    name = truss_name(http)
    r = http.post("/v1/chat/completions", json={"model": name, "messages": []})
    assert r.status_code == 200 and r.json() == "chat_completions"
    r = http.post("/v1/embeddings", json={"model": "whatever", "input": "x"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    r = http.post("/v1/chat/completions", json=chat("hi", max_tokens=3))
    assert r.json()["choices"][0]["message"]["content"] == REPLY[:3]


# -- chat --------------------------------------------------------------------------------------


def test_chat_whole_answer(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(
        model="chars", messages=[{"role": "user", "content": "hi"}], max_tokens=12, temperature=0
    )
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    choice = r.choices[0]
    assert choice.message.role == "assistant" and choice.message.content == REPLY[:12]
    assert choice.finish_reason == "length"
    assert r.usage is not None
    assert r.usage.completion_tokens == 12
    assert r.usage.prompt_tokens + r.usage.completion_tokens == r.usage.total_tokens


def test_chat_stream_equals_the_whole_answer_with_role_first_and_reason_last(
    client: openai.OpenAI, http: httpx.Client
) -> None:
    body = chat("hi", max_tokens=20, temperature=0)
    whole = http.post("/v1/chat/completions", json=body).json()
    chunks = post_stream(http, "/v1/chat/completions", {**body, "stream": True})
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all("role" not in c["choices"][0]["delta"] for c in chunks[1:])
    reasons = [c["choices"][0]["finish_reason"] for c in chunks]
    assert reasons[-1] == "length" and set(reasons[:-1]) == {None}
    assert all(
        c["object"] == "chat.completion.chunk" and c["id"] == chunks[0]["id"] for c in chunks
    )
    assert texts_by_choice(chunks)[0] == whole["choices"][0]["message"]["content"]
    # the openai client reads the same stream
    streamed = client.chat.completions.create(**body, stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    assert text == REPLY[:20]


def test_n_choices_interleave_with_their_index(http: httpx.Client) -> None:
    chunks = post_stream(http, "/v1/chat/completions", chat("hi", max_tokens=6, n=3, stream=True))
    order = [c["choices"][0]["index"] for c in chunks]
    assert set(order) == {0, 1, 2}
    assert order[:3] == [0, 1, 2]  # each choice's role first
    first_done = min(order.index(i) for i in range(3) if i in order[3:])
    assert order[3:] != sorted(order[3:]) or first_done >= 0
    assert texts_by_choice(chunks) == {0: REPLY[:6], 1: REPLY[:6], 2: REPLY[:6]}
    for i in range(3):
        mine = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"][0]["index"] == i]
        assert mine[-1] == "length" and set(mine[:-1]) == {None}


def test_stream_options_usage_rules(http: httpx.Client, client: openai.OpenAI) -> None:
    body = chat("hi", max_tokens=5, stream=True, stream_options={"include_usage": True})
    chunks = post_stream(http, "/v1/chat/completions", body)
    last = chunks[-1]
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == 5
    assert all("usage" not in c for c in chunks[:-1])
    body["stream_options"]["continuous_usage_stats"] = True
    chunks = post_stream(http, "/v1/chat/completions", body)
    assert all("usage" in c for c in chunks)
    counts = [c["usage"]["completion_tokens"] for c in chunks]
    assert counts == [0, 1, 2, 3, 4, 5, 5]  # the role chunk's 0, a token each, the usage chunk
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="chars",
            messages=[{"role": "user", "content": "hi"}],
            stream_options={"include_usage": True},
        )
    assert caught.value.status_code == 400
    assert caught.value.body["param"] == "stream_options"  # type: ignore[index]


def test_stop_strings_across_token_boundaries(http: httpx.Client, client: openai.OpenAI) -> None:
    # each character is a token: "there," spans six of them
    chunks = post_stream(
        http, "/v1/chat/completions", chat("hi", max_tokens=30, stop=["there,"], stream=True)
    )
    assert texts_by_choice(chunks)[0] == "Hello "
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    r = client.chat.completions.create(
        model="chars", messages=[{"role": "user", "content": "hi"}], max_tokens=30, stop="friend"
    )
    assert r.choices[0].message.content == "Hello there, "
    assert r.choices[0].finish_reason == "stop"


def test_eos_is_stop_and_ignore_eos_goes_on(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(
        model="chars", messages=[{"role": "user", "content": "short"}], max_tokens=20
    )
    assert r.choices[0].message.content == REPLY[:5] and r.choices[0].finish_reason == "stop"
    r = client.chat.completions.create(
        model="chars",
        messages=[{"role": "user", "content": "short"}],
        max_tokens=9,
        extra_body={"ignore_eos": True},
    )
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 9  # type: ignore[union-attr]


def test_chat_logprobs(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(
        model="chars",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=4,
        logprobs=True,
        top_logprobs=3,
    )
    content = r.choices[0].logprobs.content  # type: ignore[union-attr]
    assert content is not None and [t.token for t in content] == list(REPLY[:4])
    assert all(t.logprob == -0.25 and len(t.top_logprobs) == 3 for t in content)
    assert content[0].bytes == list(b"H")


def test_tool_calls_whole_and_streamed(client: openai.OpenAI, http: httpx.Client) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    messages = [{"role": "user", "content": "weather in Paris?"}]
    r = client.chat.completions.create(model="chars", messages=messages, tools=tools)  # type: ignore[arg-type]
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    calls = choice.message.tool_calls
    assert calls is not None and len(calls) == 1
    assert calls[0].function.name == "get_weather"  # type: ignore[union-attr]
    assert json.loads(calls[0].function.arguments) == {"city": "Paris"}  # type: ignore[union-attr]
    chunks = post_stream(
        http,
        "/v1/chat/completions",
        {"model": "chars", "messages": messages, "tools": tools, "stream": True},
    )
    deltas = [c["choices"][0]["delta"] for c in chunks]
    calls_streamed = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    assert calls_streamed[0]["function"]["name"] == "get_weather" and calls_streamed[0]["id"]
    arguments = "".join(c["function"].get("arguments", "") for c in calls_streamed)
    assert json.loads(arguments) == {"city": "Paris"}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert all(not d.get("content") for d in deltas)
    # without tools the same text is content
    r = client.chat.completions.create(model="chars", messages=messages)  # type: ignore[arg-type]
    assert r.choices[0].message.content.startswith("<tool_call>")  # type: ignore[union-attr]


def test_with_raw_response_and_async_stream(server: Server) -> None:
    with openai.OpenAI(base_url=server.url + "/v1", api_key="unused") as sync:
        raw = sync.chat.completions.with_raw_response.create(
            model="chars", messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
        assert raw.status_code == 200 and raw.headers["content-type"] == "application/json"
        assert raw.parse().choices[0].message.content == REPLY[:2]

    async def run() -> list[str]:
        async with openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="unused") as a:

            async def one() -> str:
                stream = await a.chat.completions.create(
                    model="chars",
                    messages=[{"role": "user", "content": "hi"}],
                    max_tokens=7,
                    stream=True,
                )
                return "".join([c.choices[0].delta.content or "" async for c in stream])

            return await asyncio.gather(*(one() for _ in range(5)))

    assert asyncio.run(run()) == [REPLY[:7]] * 5


# -- completions -------------------------------------------------------------------------------


def test_completions_prompts_in_every_form(client: openai.OpenAI) -> None:
    r = client.completions.create(model="chars", prompt="abc", max_tokens=5)
    assert r.object == "text_completion" and r.choices[0].text == REPLY[:5]
    ids = [10, 11, 12]
    r = client.completions.create(model="chars", prompt=[ids, ids + [13]], max_tokens=3, n=2)
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    assert r.usage.prompt_tokens == 7  # type: ignore[union-attr]
    assert r.usage.completion_tokens == 12  # type: ignore[union-attr]
    r = client.completions.create(model="chars", prompt=["a", "bb"], max_tokens=2)
    assert [c.text for c in r.choices] == [REPLY[:2]] * 2


def test_completions_echo_logprobs_as_lm_eval_asks(client: openai.OpenAI) -> None:
    # loglikelihood: echo + logprobs + max_tokens 0 or 1
    r = client.completions.create(model="chars", prompt="abcd", max_tokens=0, echo=True, logprobs=1)
    lp = r.choices[0].logprobs
    assert r.choices[0].text == "abcd"
    assert lp is not None and lp.tokens == ["a", "b", "c", "d"]
    assert lp.token_logprobs == [None, -1.0, -1.0, -1.0]
    assert lp.text_offset == [0, 1, 2, 3]
    r = client.completions.create(model="chars", prompt="abcd", max_tokens=1, echo=True, logprobs=1)
    lp = r.choices[0].logprobs
    assert r.choices[0].text == "abcd" + REPLY[0]
    assert lp is not None and lp.tokens == ["a", "b", "c", "d", "H"]
    assert lp.token_logprobs[-1] == -0.25 and lp.top_logprobs[-1] == {"H": -0.25}  # type: ignore[index]


def test_completions_stream(http: httpx.Client) -> None:
    body = {"model": "chars", "prompt": "x", "max_tokens": 8, "stream": True, "echo": True}
    chunks = post_stream(http, "/v1/completions", body)
    assert texts_by_choice(chunks, "text")[0] == "x" + REPLY[:8]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


# -- embeddings ----------------------------------------------------------------------------------


def test_embeddings_float_and_base64(client: openai.OpenAI) -> None:
    r = client.embeddings.create(model="vectors", input=["hello", "abc"])
    floats = np.array([d.embedding for d in r.data], dtype=np.float32)
    assert floats.shape == (2, 3) and [d.index for d in r.data] == [0, 1]
    assert np.allclose(np.linalg.norm(floats, axis=1), 1.0)
    raw = client.embeddings.with_raw_response.create(
        model="vectors", input=["hello", "abc"], encoding_format="base64"
    )
    data = json.loads(raw.text)["data"]
    decoded = np.array([np.frombuffer(base64.b64decode(d["embedding"]), "<f4") for d in data])
    assert np.array_equal(decoded, floats)
    with pytest.raises(openai.BadRequestError) as caught:
        client.embeddings.create(model="vectors", input="x", dimensions=2)
    assert caught.value.body["param"] == "dimensions"  # type: ignore[index]


def test_embeddings_calls_share_a_dynamic_batch(server: Server, events_file: Path) -> None:
    async def run() -> None:
        async with openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="unused") as a:
            await asyncio.gather(
                *(a.embeddings.create(model="vectors", input=["one text"]) for _ in range(4))
            )

    asyncio.run(run())
    sizes = [e["n"] for e in EventLog(events_file).of("embed")]
    assert max(sizes) >= 2  # one embed ran over the texts of several calls


# -- errors ------------------------------------------------------------------------------------

BAD = [
    ({"model": "chars"}, 400, "messages"),
    ({"model": "chars", "messages": [{"role": "wizard", "content": "x"}]}, 400, "messages[0]"),
    (chat("x", temperature="hot"), 400, "temperature"),
    (chat("x", max_tokens=0), 400, "max_tokens"),
    (chat("x", n=0), 400, "n"),
    (chat("x", max_tokens=4090), 400, "max_tokens"),
    (chat("x" * 4100), 400, "messages"),
    (chat("x", stop=["a", "b", "c", "d", "e"]), 400, "stop"),
    ({"model": "nope", "messages": [{"role": "user", "content": "x"}]}, 404, None),
]


@pytest.mark.parametrize(("body", "status", "param"), BAD)
def test_bad_requests_answer_in_openai_shape_and_the_server_goes_on(
    http: httpx.Client, body: dict, status: int, param: str | None
) -> None:
    r = http.post("/v1/chat/completions", json=body)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    if param is not None:
        assert error["param"] is not None and error["param"].startswith(param)
    assert http.post("/v1/chat/completions", json=chat("hi", max_tokens=2)).status_code == 200


def test_invalid_json_oversize_body_and_wrong_method(http: httpx.Client) -> None:
    r = http.post("/v1/chat/completions", content=b"{not json")
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    r = http.post("/v1/chat/completions", json=chat("x" * 70000))
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
    r = http.get("/v1/chat/completions")
    assert r.status_code == 405 and "error" in r.json() and "message" in r.json()["error"]


def test_the_openai_client_does_not_retry_4xx(
    client: openai.OpenAI, sent: list[httpx.Request]
) -> None:
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="chars", messages=[], max_tokens=1)
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="nope", prompt="x")
    assert len(sent) == 2


def test_a_model_failure_is_500_or_an_error_event_after_the_stream_began(
    server: Server, http: httpx.Client
) -> None:
    with (
        openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0) as strict,
        pytest.raises(openai.InternalServerError) as caught,
    ):
        strict.chat.completions.create(
            model="chars", messages=[{"role": "user", "content": "boom"}], max_tokens=9
        )
    assert "step raised RuntimeError" in caught.value.message
    r = http.post("/v1/chat/completions", json=chat("boom", max_tokens=9, stream=True))
    assert r.status_code == 200
    events = r.text.strip().split("\n\n")
    assert events[-1] == "data: [DONE]"
    error = json.loads(events[-2][len("data: ") :])["error"]
    assert error["type"] == "server_error" and "model 'chars'" in error["message"]
    assert http.post("/v1/chat/completions", json=chat("hi", max_tokens=2)).status_code == 200


# -- the engine underneath ---------------------------------------------------------------------


def steps_of(events_file: Path, tag: str) -> int:
    return sum(tag in e["batch"] for e in EventLog(events_file).of("openai-steps"))


def test_a_client_that_leaves_frees_its_place_at_the_next_step(
    http: httpx.Client, events_file: Path
) -> None:
    body = chat("tag:leaver", max_tokens=200, stream=True)
    with http.stream("POST", "/v1/chat/completions", json=body) as r:
        lines = r.iter_lines()
        got = 0
        for line in lines:
            if line.startswith("data: "):
                got += 1
            if got == 4:
                break
    # two whole requests later (each at least 10 steps), the leaver has taken no more steps
    http.post("/v1/chat/completions", json=chat("hi", max_tokens=10))
    before = steps_of(events_file, "leaver")
    http.post("/v1/chat/completions", json=chat("hi", max_tokens=10))
    assert steps_of(events_file, "leaver") == before
    assert before < 40  # far from its 200 tokens


def test_a_slow_reader_does_not_slow_the_others(server: Server, events_file: Path) -> None:
    async def run() -> None:
        async with httpx.AsyncClient(base_url=server.url, timeout=PATIENCE) as a:
            body = chat("tag:slow", max_tokens=200, stream=True)
            async with a.stream("POST", "/v1/chat/completions", json=body) as slow:
                assert slow.status_code == 200
                fast = await a.post("/v1/chat/completions", json=chat("tag:fast", max_tokens=60))
                assert fast.json()["choices"][0]["message"]["content"] == (REPLY * 2)[:60]
                assert steps_of(events_file, "fast") == 60  # one token a step, unread or not
                # the unread one is still in its batch, short of its 200 tokens
                assert steps_of(events_file, "slow") < 200

    asyncio.run(run())


def test_metrics_count_tokens_by_model(server: Server, http: httpx.Client) -> None:
    http.post("/v1/completions", json={"model": "chars", "prompt": "abc", "max_tokens": 3})
    metrics = httpx.get(server.addresses["http-metrics"] + "/metrics").text
    for name in (
        'podium_prompt_tokens_total{model="chars"',
        'podium_generation_tokens_total{model="chars"',
        'podium_time_to_first_token_seconds_count{model="chars"',
        'podium_time_per_output_token_seconds_count{model="chars"',
        'podium_request_success_total{finished_reason="length",model="chars"',
    ):
        assert name in metrics, name


def test_a_full_queue_is_503_with_retry_after(server: Server, events_file: Path) -> None:
    async def run() -> None:
        async with httpx.AsyncClient(base_url=server.url, timeout=PATIENCE) as a:
            held = [
                asyncio.create_task(
                    a.post("/v1/chat/completions", json=chat(f"hold tag:h{i}", max_tokens=5))
                )
                for i in range(12)  # batch_size 8 in the batch, max_queue_size 4 waiting
            ]
            try:
                metrics = server.addresses["http-metrics"] + "/metrics"
                queued = re.compile(r'^podium_requests_queued\{model="chars",[^}]*\} 4\.0$', re.M)
                with anyio.fail_after(PATIENCE):
                    while not queued.search((await a.get(metrics)).text):  # noqa: ASYNC110
                        await asyncio.sleep(0.02)
                r = await a.post("/v1/chat/completions", json=chat("hi", max_tokens=2))
                assert r.status_code == 503 and r.headers["retry-after"] == "1"
                assert r.json()["error"]["code"] == "queue_full"
            finally:
                for task in held:
                    task.cancel()
                await asyncio.gather(*held, return_exceptions=True)

    asyncio.run(run())


def test_oip_generate_on_the_same_model(http: httpx.Client) -> None:
    r = http.post("/v2/models/chars/generate", json={"text_input": "hi", "max_tokens": 7})
    assert r.status_code == 200
    assert r.json() == {"model_name": "chars", "model_version": "", "text_output": REPLY[:7]}
    body = {"text_input": "hi", "parameters": {"max_tokens": 5, "stop": "lo"}}
    r = http.post("/v2/models/chars/generate_stream", json=body)
    events = [json.loads(e) for e in sse_events(r.text)]
    assert "".join(e["text_output"] for e in events) == "Hel"
    r = http.post("/v2/models/chars/generate", json={"max_tokens": 7})
    assert r.status_code == 400 and "text_input" in r.json()["error"]
    # Checked as /v1/completions checks the same fields, in OIP's error shape
    for bad in ("x", 0):
        r = http.post("/v2/models/chars/generate", json={"text_input": "hi", "max_tokens": bad})
        assert r.status_code == 400 and "max_tokens" in r.json()["error"]
    r = http.post("/v2/models/chars/generate", content=b'{"text_input": "hi"')
    assert r.status_code == 400 and "malformed JSON" in r.json()["error"]


def test_every_choice_leaves_when_the_client_does(http: httpx.Client, events_file: Path) -> None:
    body = chat("tag:pair", max_tokens=300, n=2, stream=True)
    with http.stream("POST", "/v1/chat/completions", json=body) as r:
        for line in r.iter_lines():
            if '"content":"H"' in line:
                break
    http.post("/v1/chat/completions", json=chat("hi", max_tokens=10))
    before = steps_of(events_file, "pair")
    http.post("/v1/chat/completions", json=chat("hi", max_tokens=10))
    assert steps_of(events_file, "pair") == before < 60


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/completions", {"model": "chars", "prompt": [5, 99999]}, "prompt"),
        ("/v1/completions", {"model": "chars", "prompt": [[1], []]}, "prompt"),
        ("/v1/completions", {"model": "chars", "prompt": "x", "suffix": "y"}, "suffix"),
        ("/v1/embeddings", {"model": "vectors", "input": [1, 2, 3]}, "input"),
        ("/v1/embeddings", {"model": "vectors", "input": ["a", ""]}, "input[1]"),
        ("/v1/embeddings", {"model": "vectors", "input": "x", "encoding_format": "hex"}, None),
        ("/v1/chat/completions", chat("x", top_logprobs=2), "top_logprobs"),
        ("/v1/chat/completions", chat("x", tool_choice="required"), "tool_choice"),
        ("/v1/chat/completions", chat("x", surprise=1), "surprise"),
    ],
)
def test_more_bad_inputs_name_their_field(
    http: httpx.Client, path: str, body: dict, param: str | None
) -> None:
    r = http.post(path, json=body)
    assert r.status_code == 400, r.text
    if param is not None:
        assert r.json()["error"]["param"] == param


def test_a_version_by_name_at_version(http: httpx.Client) -> None:
    versions = {m["name"]: m["version"] for m in http.post("/v2/repository/index", json={}).json()}
    body = {"model": f"chars@{versions['chars']}", "prompt": "x", "max_tokens": 2}
    r = http.post("/v1/completions", json=body)
    assert r.status_code == 200 and r.json()["choices"][0]["text"] == REPLY[:2]
    r = http.post("/v1/completions", json={**body, "model": "chars@77"})
    assert r.status_code == 404


def test_the_limits_on_choices_and_inputs(http: httpx.Client) -> None:
    from podium.server.openai._serving import MAX_CHOICES
    from podium.server.openai._serving_embedding import MAX_INPUTS

    prompts = [[5]] * (MAX_CHOICES // 2 + 1)
    r = http.post("/v1/completions", json={"model": "chars", "prompt": prompts, "n": 2})
    assert r.status_code == 400 and r.json()["error"]["param"] == "n"
    assert str(MAX_CHOICES) in r.json()["error"]["message"]
    r = http.post("/v1/embeddings", json={"model": "vectors", "input": ["a"] * (MAX_INPUTS + 1)})
    assert r.status_code == 400 and r.json()["error"]["param"] == "input"
    r = http.post("/v1/embeddings", json={"model": "vectors", "input": ["a"] * 3})
    assert r.status_code == 200


def test_embeddings_from_worker_processes() -> None:
    with (
        run_server(TEST_MODELS / "openai-process" / "vectors-process") as running,
        openai.OpenAI(base_url=running.url + "/v1", api_key="unused", max_retries=0) as c,
    ):
        assert [m.id for m in c.models.list()] == ["vectors-process"]
        r = c.embeddings.create(model="vectors-process", input=["hello", "abc"])
        floats = np.array([d.embedding for d in r.data])
        assert floats.shape == (2, 3) and np.allclose(np.linalg.norm(floats, axis=1), 1.0)


def test_generation_in_a_worker_process(tmp_path: Path) -> None:
    """The chars model with ``workers: process``: its steps run in the worker process (the
    server keeps the batch and tokenizes with the tokenizer the worker sent), with the same
    answers as in a thread worker, streams, ``n``, a failing step, and a client that leaves."""
    folder = tmp_path / "chars"
    shutil.copytree(MODELS / "chars", folder)
    with (folder / "config.yaml").open("a") as config:
        config.write("workers: process\n")
    events = tmp_path / "events.jsonl"
    with (
        run_server(folder, env={"PODIUM_E2E_EVENTS": str(events)}) as running,
        openai.OpenAI(base_url=running.url + "/v1", api_key="unused", max_retries=0) as c,
        httpx.Client(base_url=running.url, timeout=PATIENCE) as http,
    ):
        assert [m.id for m in c.models.list()] == ["chars"]
        r = c.chat.completions.create(
            model="chars", messages=[{"role": "user", "content": "hi"}], max_tokens=12
        )
        assert r.choices[0].message.content == REPLY[:12]
        assert r.choices[0].finish_reason == "length" and r.usage is not None
        assert r.usage.completion_tokens == 12
        chunks = post_stream(http, "/v1/chat/completions", chat("hi", max_tokens=9, stream=True))
        assert texts_by_choice(chunks)[0] == REPLY[:9]
        assert chunks[-1]["choices"][0]["finish_reason"] == "length"
        both = c.completions.create(model="chars", prompt="abc", max_tokens=4, n=2)
        assert [ch.text for ch in both.choices] == [REPLY[:4]] * 2
        short = c.chat.completions.create(
            model="chars", messages=[{"role": "user", "content": "short"}], max_tokens=20
        )
        assert short.choices[0].message.content == REPLY[:5]
        assert short.choices[0].finish_reason == "stop"
        with pytest.raises(openai.InternalServerError) as caught:
            c.chat.completions.create(
                model="chars", messages=[{"role": "user", "content": "boom"}], max_tokens=9
            )
        assert "step raised RuntimeError" in caught.value.message
        body = chat("tag:leaver", max_tokens=200, stream=True)
        with http.stream("POST", "/v1/chat/completions", json=body) as left:
            got = 0
            for line in left.iter_lines():
                got += line.startswith("data: ")
                if got == 4:
                    break
        http.post("/v1/chat/completions", json=chat("hi", max_tokens=10))
        before = steps_of(events, "leaver")
        http.post("/v1/chat/completions", json=chat("hi", max_tokens=10))
        assert steps_of(events, "leaver") == before < 40  # it left the batch


def test_a_models_own_chat_and_complete() -> None:
    with (
        run_server(MODELS / "talker") as running,
        openai.OpenAI(base_url=running.url + "/v1", api_key="unused", max_retries=0) as c,
        httpx.Client(base_url=running.url, timeout=PATIENCE) as http,
    ):
        messages = [{"role": "user", "content": "hello there"}]
        r = c.chat.completions.create(model="talker", messages=messages)  # type: ignore[arg-type]
        assert r.choices[0].message.content == "you said: hello there "
        assert r.choices[0].finish_reason == "stop"
        chunks = post_stream(
            http,
            "/v1/chat/completions",
            {"model": "talker", "messages": messages, "stream": True, "stop": "there"},
        )
        assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
        assert texts_by_choice(chunks)[0] == "you said: hello "
        assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
        r2 = c.completions.create(model="talker", prompt="shout")
        assert r2.choices[0].text == "SHOUT" and r2.usage.total_tokens == 0  # type: ignore[union-attr]
        with pytest.raises(openai.BadRequestError):
            c.chat.completions.create(model="talker", messages=messages, n=2)  # type: ignore[arg-type]


def test_a_model_still_loading_is_503_not_truss_404(tmp_path: Path) -> None:
    gate = tmp_path / "loaded"
    with socket.socket() as s:  # a free port, so the test can talk to it while it loads
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    starting = run_server(
        MODELS.parent / "openai-slow",
        args=("--http-port", str(port)),
        env={"PODIUM_E2E_LOAD_GATE": str(gate)},
    )
    with ThreadPoolExecutor(1) as pool:
        entered = pool.submit(starting.__enter__)
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=PATIENCE) as c:
                deadline = time.monotonic() + PATIENCE
                while True:
                    try:
                        c.get("/v2/health/live")
                        break
                    except httpx.TransportError:
                        assert not entered.done(), entered.exception()
                        assert time.monotonic() < deadline
                        time.sleep(0.01)
                # vLLM's /health, which load tools poll: not ready while the model loads
                r = c.get("/health")
                assert (r.status_code, r.content) == (503, b"")
                body = {"model": "chars-slow", "prompt": "x", "max_tokens": 2}
                r = c.post("/v1/completions", json=body)
                assert r.status_code == 503 and r.headers["retry-after"] == "1"
                assert r.json()["error"]["code"] == "service_unavailable"
                gate.touch()
                entered.result(timeout=PATIENCE)
                assert (c.get("/health").status_code, c.get("/health").content) == (200, b"")
                r = c.post("/v1/completions", json=body)
                assert r.status_code == 200 and r.json()["choices"][0]["text"] == REPLY[:2]
        finally:
            gate.touch()
            starting.__exit__(None, None, None)
