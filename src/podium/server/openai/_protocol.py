"""OpenAI's request and response bodies, as typed structs (after vLLM's ``protocol.py``).

A request is decoded straight into its struct by msgspec, which checks every field's type and
bounds; :func:`decode` turns a failure into OpenAI's 400 naming the field (``param``). Fields
OpenAI's own API accepts are accepted, and so are the sampling fields load tools and
OpenAI-compatible servers send (vLLM's ``ignore_eos``, ``top_k``, ``min_p``, ...); any other
field is refused, as OpenAI refuses it ("Unrecognized request argument supplied").
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, TypeVar

import msgspec
from msgspec import Meta

from ...codecs import JSON_ERRORS, json_problem
from ...errors import InvalidInput, bounded

__all__ = [
    "ChatCompletionRequest",
    "CompletionRequest",
    "EmbeddingRequest",
    "OpenAIInvalid",
    "StreamOptions",
    "decode",
]

T = TypeVar("T")

Penalty = Annotated[float, Meta(ge=-2.0, le=2.0)]
Temperature = Annotated[float, Meta(ge=0.0, le=2.0)]
Probability = Annotated[float, Meta(ge=0.0, le=1.0)]
Count = Annotated[int, Meta(ge=1, le=128)]
Tokens = Annotated[int, Meta(ge=1)]


class OpenAIInvalid(InvalidInput):
    """A request OpenAI's API would refuse: its message, and the field it names (``param``)."""

    code = "invalid_request_error"

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = None if param is None else bounded(param)  # it may name a client's field


class StreamOptions(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    include_usage: bool = False
    continuous_usage_stats: bool = False


class TextPart(msgspec.Struct, tag_field="type", tag="text", forbid_unknown_fields=True):
    text: str


class ImageURL(msgspec.Struct):
    url: str
    detail: str = "auto"


class ImagePart(msgspec.Struct, tag_field="type", tag="image_url", forbid_unknown_fields=True):
    image_url: ImageURL


Content = str | list[TextPart | ImagePart]


class FunctionCall(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    arguments: str


class ToolCall(msgspec.Struct, forbid_unknown_fields=True):
    id: str
    function: FunctionCall
    type: Literal["function"] = "function"


class SystemMessage(msgspec.Struct, tag_field="role", tag="system", forbid_unknown_fields=True):
    content: Content
    name: str | None = None


class DeveloperMessage(
    msgspec.Struct, tag_field="role", tag="developer", forbid_unknown_fields=True
):
    content: Content
    name: str | None = None


class UserMessage(msgspec.Struct, tag_field="role", tag="user", forbid_unknown_fields=True):
    content: Content
    name: str | None = None


class AssistantMessage(
    msgspec.Struct, tag_field="role", tag="assistant", forbid_unknown_fields=True
):
    content: Content | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    refusal: str | None = None


class ToolMessage(msgspec.Struct, tag_field="role", tag="tool", forbid_unknown_fields=True):
    content: Content
    tool_call_id: str


Message = SystemMessage | DeveloperMessage | UserMessage | AssistantMessage | ToolMessage


class FunctionDefinition(msgspec.Struct, forbid_unknown_fields=True):
    name: Annotated[str, Meta(pattern=r"^[a-zA-Z0-9_-]{1,64}$")]
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(msgspec.Struct, forbid_unknown_fields=True):
    function: FunctionDefinition
    type: Literal["function"] = "function"


class NamedFunction(msgspec.Struct, forbid_unknown_fields=True):
    name: str


class NamedToolChoice(msgspec.Struct, forbid_unknown_fields=True):
    function: NamedFunction
    type: Literal["function"] = "function"


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice


class JSONSchema(msgspec.Struct):
    name: str
    schema: dict[str, Any] | None = None
    description: str | None = None
    strict: bool | None = None


class ResponseFormat(msgspec.Struct, forbid_unknown_fields=True):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JSONSchema | None = None


Stop = str | list[str] | None


class _Sampling(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """What both generating requests share, OpenAI's fields and the usual extras."""

    model: str
    stream: bool = False
    stream_options: StreamOptions | None = None
    temperature: Temperature | None = None
    top_p: Probability | None = None
    n: Count = 1
    stop: Stop = None
    seed: int | None = None
    presence_penalty: Penalty = 0.0
    frequency_penalty: Penalty = 0.0
    logit_bias: dict[str, Annotated[float, Meta(ge=-100, le=100)]] | None = None
    user: str | None = None
    # What OpenAI-compatible servers and load tools send beside OpenAI's own fields
    ignore_eos: bool = False
    top_k: int | None = None
    min_p: Probability | None = None
    repetition_penalty: Annotated[float, Meta(gt=0.0)] | None = None
    min_tokens: Annotated[int, Meta(ge=0)] = 0
    skip_special_tokens: bool = True
    # OpenAI's own fields that change nothing here
    store: bool | None = None
    metadata: dict[str, str] | None = None
    service_tier: str | None = None


class ChatCompletionRequest(_Sampling, kw_only=True):
    messages: Annotated[list[Message], Meta(min_length=1)]
    max_tokens: Tokens | None = None
    max_completion_tokens: Tokens | None = None
    logprobs: bool = False
    top_logprobs: Annotated[int, Meta(ge=0, le=20)] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool = True
    response_format: ResponseFormat | None = None
    reasoning_effort: str | None = None
    modalities: list[str] | None = None

    def token_limit(self) -> int | None:
        """The most tokens to generate: ``max_completion_tokens``, else ``max_tokens``."""
        return self.max_completion_tokens or self.max_tokens


#: A prompt or an input: a string, strings, token ids, or lists of token ids (checked by
#: :func:`_check_texts`: msgspec's unions hold one list type at most).
Texts = str | list[Any]


class CompletionRequest(_Sampling, kw_only=True):
    prompt: Texts
    max_tokens: Annotated[int, Meta(ge=0)] | None = 16
    echo: bool = False
    logprobs: Annotated[int, Meta(ge=0, le=5)] | None = None
    suffix: str | None = None
    best_of: Count | None = None


class EmbeddingRequest(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    model: str
    input: Texts
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Tokens | None = None
    user: str | None = None


_PATH = re.compile(r" - at `\$((?:\.[A-Za-z_][A-Za-z_0-9]*|\[\d+\])*)`$")
_UNKNOWN = re.compile(r"^Object contains unknown field `([^`]*)`")
_MISSING = re.compile(r"^Object missing required field `([^`]*)`")


def _param(path: str) -> str | None:
    """``.messages[0].role`` → ``messages[0].role``: OpenAI's ``param``."""
    return path[1:] if path.startswith(".") else (path or None)


def decode(body: bytes | dict[str, Any], kind: type[T]) -> T:
    """``body`` (JSON, or its fields already decoded) as a ``kind`` request; ``OpenAIInvalid``
    (400) naming the field otherwise."""
    try:
        if isinstance(body, dict):
            request = msgspec.convert(body, kind)
        else:
            request = msgspec.json.decode(body, type=kind)
    except msgspec.ValidationError as exc:
        text = str(exc)
        where = _PATH.search(text)
        path = where.group(1) if where else ""
        detail = text[: where.start()] if where else text
        unknown = _UNKNOWN.match(detail)
        if unknown:
            field = ".".join(p for p in (path[1:], unknown.group(1)) if p)
            raise OpenAIInvalid(f"Unrecognized request argument supplied: {field}", field) from None
        missing = _MISSING.match(detail)
        if missing and not path:  # a top-level field: OpenAI names it
            raise OpenAIInvalid(detail, missing.group(1)) from None
        param = _param(path)
        raise OpenAIInvalid(f"{detail} - '{param}'" if param else detail, param) from None
    except JSON_ERRORS as exc:
        assert not isinstance(body, dict)  # (fields already decoded are converted, not parsed)
        raise OpenAIInvalid(
            f"The request body is not valid JSON: {json_problem(exc, body)}"
        ) from None
    _check(request)
    return request


def _check(request: Any) -> None:
    """The rules between fields, as OpenAI states them."""
    if getattr(request, "stream_options", None) is not None and not request.stream:
        raise OpenAIInvalid(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled",
            "stream_options",
        )
    stop = getattr(request, "stop", None)
    if isinstance(stop, list) and len(stop) > 4:
        raise OpenAIInvalid("'stop' may hold at most 4 sequences", "stop")
    if isinstance(request, ChatCompletionRequest):
        if request.top_logprobs is not None and not request.logprobs:
            raise OpenAIInvalid(
                "'top_logprobs' is only allowed when 'logprobs' is true", "top_logprobs"
            )
        if isinstance(request.tool_choice, NamedToolChoice):
            names = {t.function.name for t in request.tools or ()}
            if request.tool_choice.function.name not in names:
                raise OpenAIInvalid(
                    f"'tool_choice' names the function '{request.tool_choice.function.name}', "
                    "which 'tools' does not define",
                    "tool_choice",
                )
        elif request.tool_choice in ("auto", "required") and not request.tools:
            raise OpenAIInvalid(
                f"'tool_choice' is '{request.tool_choice}' but no 'tools' are given",
                "tool_choice",
            )
        for i, message in enumerate(request.messages):
            if isinstance(message, ToolMessage) and not message.tool_call_id:
                raise OpenAIInvalid(
                    "a message of role 'tool' needs its 'tool_call_id'",
                    f"messages[{i}].tool_call_id",
                )
    if isinstance(request, CompletionRequest):
        _check_texts(request.prompt, "prompt")
    elif isinstance(request, EmbeddingRequest):
        _check_texts(request.input, "input")


def _is_ids(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(type(i) is int and i >= 0 for i in value)


def _check_texts(value: Any, name: str) -> None:
    """A string, a list of strings, a list of token ids or a list of such lists, none empty."""
    if isinstance(value, str):
        if not value:
            raise OpenAIInvalid(f"'{name}' must not be empty", name)
        return
    if not value:
        raise OpenAIInvalid(f"'{name}' must not be empty", name)
    if all(isinstance(item, str) for item in value):
        for i, item in enumerate(value):
            if not item:
                raise OpenAIInvalid(f"'{name}[{i}]' must not be empty", f"{name}[{i}]")
        return
    if _is_ids(value) or all(_is_ids(item) for item in value):
        return
    raise OpenAIInvalid(
        f"'{name}' must be a string, a list of strings, a list of token ids (integers >= 0) "
        "or a list of such lists, none of them empty",
        name,
    )
