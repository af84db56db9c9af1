"""What a model's first parameter asks for, read off its annotation (docs/protocols.md's table).

One request's inputs become the OIP request itself for ``InferenceRequest``, a validated object
for a pydantic model, and the decoded inputs for anything else. A batched ``predict`` gets a
list of those, one per request, and says so the way a type checker wants it: ``list[X]`` (or
``Sequence[X]``) asks for each element as ``X`` would. Without batching ``list[X]`` is "anything
else", as it always was: a JSON list body, say, passed as it came.

The raw request is asked for by its own annotation (starlette's ``Request``), a stateful
sequence's context by ``podium.Context``. A batched ``predict`` gets the list of the requests, and
in a sequence model's batches the list of their Contexts; it may annotate each so
(``list[Request]``, ``list[Context]``). Where one request comes that annotation would be false,
so the contract refuses it there.
"""

from __future__ import annotations

import collections.abc
import types
import typing
from collections.abc import Iterable, Iterator
from typing import Any, get_args, get_origin

from ..config import ModelConfig
from ..types import InferenceRequest, InputKind

__all__ = [
    "batched_predict",
    "context_form",
    "input_form",
    "is_request_annotation",
    "is_schema_annotation",
    "mro_has",
    "one_context_lists",
    "one_request_lists",
    "raw_requests_batch",
    "requests_batch",
]

#: What ``get_origin`` gives for ``list[X]``, ``typing.List[X]``, ``collections.abc.Sequence[X]``
#: and ``typing.Sequence[X]``: the annotations that name a batch by its elements.
_BATCHES = (list, collections.abc.Sequence)


def mro_has(annotation: Any, module: str, qualname: str) -> bool:
    """Whether ``annotation`` is a class deriving from ``module.qualname`` (imports nothing)."""
    if not isinstance(annotation, type):
        return False
    return any(c.__module__ == module and c.__qualname__ == qualname for c in annotation.__mro__)


def _optional(annotation: Any) -> tuple[Any, bool]:
    """``X`` and True for ``X | None`` (``Optional[X]``); else ``annotation`` as it is and False
    (a union of two types or more then matches none of the forms here)."""
    if get_origin(annotation) in (typing.Union, types.UnionType):
        members = [a for a in get_args(annotation) if a is not type(None)]
        if len(members) == 1:
            return members[0], True
    return annotation, False


def is_request_annotation(annotation: Any) -> bool:
    """A parameter asks for the raw request when annotated with a starlette ``Request`` subclass.

    Checked by name so that this layer imports no web library; ``fastapi.Request`` qualifies,
    and so does ``Request | None`` (``Optional[Request]``).
    """
    return mro_has(_optional(annotation)[0], "starlette.requests", "Request")


def is_schema_annotation(annotation: Any) -> bool:
    """A pydantic ``BaseModel`` subclass (pydantic is optional and not imported here)."""
    return mro_has(annotation, "pydantic.main", "BaseModel")


def batched_predict(config: ModelConfig) -> bool:
    """Whether ``predict`` gets a list of requests' inputs: dynamic batching, or the batches of
    a stateful sequence's worker. A continuously batched model steps through ``step`` instead."""
    continuous = config.continuous_batching and not config.sequence_batching
    return config.batch_size > 1 and not continuous


def input_form(annotation: Any, *, batched: bool = False) -> tuple[InputKind, type | None]:
    """The input kind one request's payload is converted into, and its pydantic model (else
    None). ``batched``: ``annotation`` is that of a parameter that gets a list of them, so
    ``list[X]`` asks for what ``X`` does; a bare ``list`` or ``list[Any]`` stays the default."""
    if batched and get_origin(annotation) in _BATCHES and len(get_args(annotation)) == 1:
        (annotation,) = get_args(annotation)
    if isinstance(annotation, type) and issubclass(annotation, InferenceRequest):
        return InputKind.OIP_REQUEST, None
    if is_schema_annotation(annotation):
        return InputKind.SCHEMA, annotation
    return InputKind.DEFAULT, None


def _element(annotation: Any) -> Any:
    """``X`` of ``list[X]`` (or another spelling of a batch); None for anything else."""
    if get_origin(annotation) not in _BATCHES or len(get_args(annotation)) != 1:
        return None
    return get_args(annotation)[0]


def requests_batch(annotation: Any) -> bool:
    """Whether ``annotation`` names a batch of OIP requests (``list[InferenceRequest]`` and the
    other spellings of a batch): what only a batched ``predict`` can be given."""
    element = _element(annotation)
    return isinstance(element, type) and issubclass(element, InferenceRequest)


def raw_requests_batch(annotation: Any) -> bool:
    """Whether ``annotation`` names a batch of raw requests (``list[Request]``, the other
    spellings of a batch, each element as :func:`is_request_annotation` reads it; optional as
    ``Request | None`` is, ``list[Request] | None``): what a batched ``predict`` that takes the
    request is given, and no other method."""
    element = _element(_optional(annotation)[0])
    return element is not None and is_request_annotation(element)


def _is_context(annotation: Any) -> bool:
    # by name: a subclass counts, and so does the class from another import of podium.types
    return mro_has(annotation, "podium.types", "Context")


def context_form(annotation: Any) -> tuple[bool, bool] | None:
    """None if ``annotation`` asks for no ``podium.Context``; else whether it is optional and
    whether it is a list. Optional (``Context | None``; ``list[Context] | None`` or
    ``list[Context | None]``) declares that the model also runs without ``sequence_batching``,
    where it gets None. A list (``list[Context]``, the other spellings of a batch) is what a
    sequence model's batched ``predict`` gets, one Context per request, and no other method."""
    annotation, optional = _optional(annotation)
    element = _element(annotation)
    if element is None:
        return (optional, False) if _is_context(annotation) else None
    element, each_optional = _optional(element)
    return (optional or each_optional, True) if _is_context(element) else None


def _given_one(methods: Iterable[Any], config: ModelConfig) -> Iterator[tuple[Any, str, str]]:
    """The methods of ``methods`` given one request's arguments under ``config``: every one but
    a batched ``predict`` (preprocess, postprocess and the rest run once per request); each with
    why it gets one, and the end of what to change."""
    batched = batched_predict(config)
    for m in methods:
        if m is None or (m.name == "predict" and batched):
            continue
        if m.name == "predict":
            why = f"model '{config.name}' does not batch predict"
            yield m, why, " (or set batch_size above 1 to batch it)"
        else:
            yield m, f"{m.name} runs once per request", ""


def one_request_lists(cls: type, methods: Iterable[Any], config: ModelConfig) -> list[str]:
    """The problems of ``methods`` (a native model's or a truss's: each with its ``name`` and
    ``request_list``, the name of a request parameter annotated as a list of requests) where
    one request comes (:func:`_given_one`). Given one request where it declared a list, the
    model would index it or loop over it and fail at request time: refused at load instead."""
    return [
        f"{cls.__name__}.{m.name}: its request parameter '{m.request_list}' is annotated "
        f"as a list of requests, which only a batched predict gets; {why}, so it gets one "
        f"request: annotate it starlette.requests.Request{fix}"
        for m, why, fix in _given_one(methods, config)
        if m.request_list is not None
    ]


def one_context_lists(cls: type, methods: Iterable[Any], config: ModelConfig) -> list[str]:
    """The same for a Context parameter annotated as a list of Contexts (a native model's
    methods, each with ``context_list``, that parameter's name, and ``context_optional``; a
    truss has no Context): only a sequence model's batched ``predict`` gets a list."""
    problems = []
    for m, why, fix in _given_one(methods, config):
        if m.context_list is None:
            continue
        plain = "podium.Context | None" if m.context_optional else "podium.Context"
        problems.append(
            f"{cls.__name__}.{m.name}: its Context parameter '{m.context_list}' is annotated "
            f"as a list of Contexts, which only a batched predict gets; {why}, so it gets one "
            f"Context: annotate it {plain}{fix}"
        )
    return problems
