"""OpenAI's request bodies decoded and checked: what OpenAI accepts is accepted (and the extras
load tools send), anything else is a 400 naming the field."""

from __future__ import annotations

import json
from typing import Any

import pytest

from podium.server.openai import (
    ChatCompletionRequest,
    CompletionRequest,
    EmbeddingRequest,
    OpenAIInvalid,
    decode,
)


def chat(**fields: Any) -> ChatCompletionRequest:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}
    return decode(json.dumps(body).encode(), ChatCompletionRequest)


def refused(kind: type, body: dict[str, Any]) -> OpenAIInvalid:
    with pytest.raises(OpenAIInvalid) as info:
        decode(json.dumps(body).encode(), kind)
    return info.value


def test_a_full_chat_request_decodes() -> None:
    request = chat(
        messages=[
            {"role": "system", "content": "be brief"},
            {"role": "developer", "content": [{"type": "text", "text": "really"}]},
            {"role": "user", "content": "what is 2+2?", "name": "ada"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "content": "4", "tool_call_id": "c1"},
        ],
        stream=True,
        stream_options={"include_usage": True},
        max_completion_tokens=5,
        temperature=0,
        top_p=1,
        n=2,
        stop=["\n", "END"],
        seed=1,
        logprobs=True,
        top_logprobs=3,
        tools=[{"type": "function", "function": {"name": "add", "parameters": {}}}],
        tool_choice={"type": "function", "function": {"name": "add"}},
        response_format={"type": "json_object"},
        user="u",
        ignore_eos=True,  # what load tools send
        top_k=5,
    )
    assert len(request.messages) == 5
    assert request.token_limit() == 5
    assert request.stream_options is not None and request.stream_options.include_usage


def test_stop_null_and_max_tokens_are_taken() -> None:
    request = chat(stop=None, max_tokens=7)
    assert request.stop is None and request.token_limit() == 7


@pytest.mark.parametrize(
    ("fields", "param", "words"),
    [
        ({"temperature": "hot"}, "temperature", "Expected `float | null`"),
        ({"temperature": 3}, "temperature", "<= 2.0"),
        ({"max_tokens": 0}, "max_tokens", ">= 1"),
        ({"n": 0}, "n", ">= 1"),
        ({"messages": []}, "messages", "length >= 1"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role", "robot"),
        ({"messages": [{"role": "user"}]}, "messages[0]", "missing required field `content`"),
        ({"stream_options": {"include_usage": True}}, "stream_options", "only allowed when"),
        ({"top_logprobs": 2}, "top_logprobs", "'logprobs' is true"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop", "at most 4"),
        ({"tool_choice": "required"}, "tool_choice", "no 'tools'"),
        ({"frobnicate": 1}, "frobnicate", "Unrecognized request argument supplied: frobnicate"),
    ],
)
def test_a_bad_chat_field_is_named(fields: dict[str, Any], param: str, words: str) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}
    error = refused(ChatCompletionRequest, body)
    assert error.param == param
    assert words in error.message


def test_missing_model_and_bad_json() -> None:
    error = refused(ChatCompletionRequest, {"messages": [{"role": "user", "content": "x"}]})
    assert "missing required field `model`" in error.message
    with pytest.raises(OpenAIInvalid) as info:
        decode(b"{nope", ChatCompletionRequest)
    assert "not valid JSON" in info.value.message


def test_bad_utf8_and_a_huge_unknown_field_are_400s_that_stay_bounded() -> None:
    # Named as every JSON route names it (codecs.json_problem), never a 500
    with pytest.raises(OpenAIInvalid) as info:
        decode(b'{"model": "m\xff", "messages": []}', ChatCompletionRequest)
    assert "invalid UTF-8: byte 0xff at offset 12" in info.value.message
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "x" * 100_000: 1}
    error = refused(ChatCompletionRequest, body)
    assert error.param is not None and error.param.startswith("xxx")
    assert len(error.param) < 2_000
    assert len(error.message) < 2_000


@pytest.mark.parametrize("prompt", ["a", ["a", "b"], [1, 2, 3], [[1, 2], [3]]])
def test_completion_prompts_of_every_form(prompt: Any) -> None:
    body = json.dumps(
        {"model": "m", "prompt": prompt, "echo": True, "logprobs": 1, "max_tokens": 0}
    )
    request = decode(body.encode(), CompletionRequest)
    assert request.prompt == prompt and request.max_tokens == 0


@pytest.mark.parametrize("prompt", ["", [], [[]], [-1]])
def test_empty_or_negative_prompts_are_refused(prompt: Any) -> None:
    assert refused(CompletionRequest, {"model": "m", "prompt": prompt}).param is not None


def test_embedding_requests() -> None:
    body = {"model": "m", "input": ["a", "b"], "encoding_format": "base64", "dimensions": 8}
    request = decode(json.dumps(body).encode(), EmbeddingRequest)
    assert request.encoding_format == "base64"
    error = refused(EmbeddingRequest, {**body, "encoding_format": "hex"})
    assert error.param == "encoding_format"
