"""Tool calls read from the text a model generated, by one documented rule (docs/openai.md).

A model has no tool-call channel of its own: it writes calls as text, in the form its chat
template taught it. Podium reads two forms:

1. Hermes-style blocks (Qwen, Hermes, many others): ``<tool_call>{"name": ..., "arguments":
   {...}}</tool_call>``, one block per call; text outside the blocks is the message's content.
2. The whole text is one JSON object ``{"name": ..., "arguments"|"parameters": {...}}`` (Llama
   3's form), or a list of them.

A call counts only if it names one of the request's ``tools``. With ``tool_choice`` naming a
function, a whole-text JSON object without ``name`` is that function's arguments. Text that
parses as neither is the message's content, and the choice's ``finish_reason`` stays what it
was; with calls it is ``tool_calls``. Nothing constrains the decoding: a model that writes no
call makes none, whatever ``tool_choice`` says.
"""

from __future__ import annotations

import json
import re
import secrets
from typing import Any

__all__ = ["could_be_call", "parse_tool_calls"]

_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
_OPEN = "<tool_call>"


def could_be_call(text: str) -> bool:
    """Whether a choice's text, so far, may turn out to be tool calls (a stream then holds it
    back until the choice ends)."""
    head = text.lstrip()
    if not head:
        return True
    return head[0] in "{[" or _OPEN.startswith(head[: len(_OPEN)]) or _OPEN in text


def _call(value: Any, names: set[str], named: str | None) -> dict[str, Any] | None:
    if not isinstance(value, dict):
        return None
    name: Any = value.get("name")
    arguments: Any
    if name is None and named is not None:
        name, arguments = named, value
    else:
        arguments = value.get("arguments", value.get("parameters", {}))
    if name not in names:
        return None
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return {
        "id": f"call_{secrets.token_hex(12)}",
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def parse_tool_calls(
    text: str, names: set[str], named: str | None = None
) -> tuple[str | None, list[dict[str, Any]]]:
    """``text``'s content (None where nothing is left) and the tool calls it holds."""
    blocks = _BLOCK.findall(text)
    if blocks:
        calls = []
        for block in blocks:
            try:
                call = _call(json.loads(block), names, named)
            except ValueError:
                call = None
            if call is not None:
                calls.append(call)
        if calls:
            rest = _BLOCK.sub("", text).strip()
            return rest or None, calls
        return text, []
    try:
        value = json.loads(text)
    except ValueError:
        return text, []
    items = value if isinstance(value, list) else [value]
    found = [_call(item, names, named) for item in items]
    if items and all(call is not None for call in found):
        return None, [call for call in found if call is not None]
    return text, []
