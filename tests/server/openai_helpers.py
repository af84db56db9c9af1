"""Helpers of the OpenAI API's end-to-end tests: SSE parsing and the test model's text."""

from __future__ import annotations

import json
from typing import Any

import httpx

#: What tests/models/openai/chars writes, greedy.
REPLY = "Hello there, friend. How are you today? "


def sse_events(text: str) -> list[str]:
    """The ``data:`` payloads of an SSE body, in order (``[DONE]`` as it is)."""
    out = []
    for block in text.split("\n\n"):
        block = block.strip()
        if block:
            assert block.startswith("data: "), block
            out.append(block[len("data: ") :])
    return out


def chunks_of(text: str) -> list[dict[str, Any]]:
    """The JSON chunks of an SSE body, checking that ``[DONE]`` ends it and only it."""
    events = sse_events(text)
    assert events[-1] == "[DONE]"
    assert "[DONE]" not in events[:-1]
    return [json.loads(e) for e in events[:-1]]


def post_stream(client: httpx.Client, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    r = client.post(path, json=body)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    return chunks_of(r.text)


def texts_by_choice(chunks: list[dict[str, Any]], key: str = "content") -> dict[int, str]:
    out: dict[int, str] = {}
    for chunk in chunks:
        for choice in chunk["choices"]:
            delta = choice.get("delta", choice)
            out[choice["index"]] = out.get(choice["index"], "") + (delta.get(key) or "")
    return out


def chat(content: str, **fields: Any) -> dict[str, Any]:
    return {"model": "chars", "messages": [{"role": "user", "content": content}], **fields}
