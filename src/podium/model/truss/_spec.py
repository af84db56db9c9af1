"""A truss's model class, checked by Truss's rules when it is loaded.

Truss's rules (its ``ModelDescriptor``): each of ``preprocess``, ``predict``, ``postprocess``
and the OpenAI-style methods takes nothing, the inputs, the request (a parameter annotated with
starlette's ``Request``), or the inputs then the request; ``is_healthy`` takes nothing;
``websocket`` is async, takes the WebSocket, and excludes predict, preprocess and postprocess;
a model has ``predict`` or ``websocket``; ``preprocess`` excludes a ``predict`` that takes only
the request, and ``postprocess`` must take the outputs. Podium adds one: a ``predict`` batched by
``podium.yaml`` may annotate its request as the list of requests it gets (``list[Request]``), and
no other method may (``one_request_lists``). Whether ``predict`` streams is decided
by the value it returns, not by its kind. The schema (``/schema``) follows Truss's
``TrussSchema``: pydantic annotations of the first method's input and of the last method's
return value.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Generator, Iterator
from dataclasses import dataclass
from typing import Any

from ...errors import DefinitionError
from ...types import ENDPOINT_METHODS
from .._forms import is_request_annotation, is_schema_annotation, raw_requests_batch
from ..native import _hints, method_parameters

__all__ = ["INIT_KWARGS", "TrussMethod", "TrussSpec", "inspect_truss", "io_schema"]

#: What Truss passes a model's constructor, by name (one with ``**kwargs`` gets them all).
INIT_KWARGS = ("config", "data_dir", "secrets", "lazy_data_resolver", "environment")


@dataclass(frozen=True, slots=True)
class TrussMethod:
    """How to call one method of a truss's model."""

    name: str
    takes_inputs: bool
    takes_request: bool
    is_async: bool  # a coroutine function: awaited
    is_generator: bool  # a (async) generator function: called, never awaited
    input_annotation: Any = None
    #: the request parameter's name where it is annotated as a list of requests (Podium's own
    #: rule: right only for a predict batched by podium.yaml; ``one_request_lists``)
    request_list: str | None = None

    def args(self, inputs: Any, request: Any) -> tuple[Any, ...]:
        if self.takes_inputs:
            return (inputs, request) if self.takes_request else (inputs,)
        return (request,) if self.takes_request else ()


@dataclass(frozen=True, slots=True)
class TrussSpec:
    """The checked shape of a truss's model class."""

    cls: type
    preprocess: TrussMethod | None
    predict: TrussMethod | None  # None for a WebSocket model
    postprocess: TrussMethod | None
    is_healthy: TrussMethod | None
    websocket: TrussMethod | None
    endpoints: dict[str, TrussMethod]
    init_kwargs: tuple[str, ...]
    input_schema: type | None
    schema: dict[str, Any] | None

    @property
    def needs_inputs(self) -> bool:
        """Truss's ``skip_input_parsing`` negated: the body is parsed unless predict (and
        preprocess, if any) take only the request."""
        if self.predict is None:
            return False
        first = [m for m in (self.preprocess, self.predict) if m is not None]
        return not all(m.takes_request and not m.takes_inputs for m in first)

    @property
    def needs_request(self) -> bool:
        methods = [self.preprocess, self.predict, self.postprocess, *self.endpoints.values()]
        return any(m is not None and m.takes_request for m in methods)


def _method(cls: type, name: str, problems: list[str]) -> TrussMethod | None:
    found = method_parameters(cls, name, problems)
    if found is None:
        return None
    fn, params, hints = found
    where = f"{cls.__name__}.{name}"
    is_async = inspect.iscoroutinefunction(fn)
    is_generator = inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn)
    if not params:
        return TrussMethod(name, False, False, is_async, is_generator)
    last = params[-1].name
    listed = last if raw_requests_batch(hints.get(last)) else None
    if len(params) == 1:
        if listed or is_request_annotation(hints.get(last)):
            return TrussMethod(name, False, True, is_async, is_generator, None, listed)
        annotation = hints.get(params[0].name)
        return TrussMethod(name, True, False, is_async, is_generator, annotation)
    if len(params) == 2:
        first, second = (hints.get(p.name) for p in params)
        if is_request_annotation(first) or raw_requests_batch(first):
            problems.append(
                f"`{name}` method with two arguments is not allowed to have request as first "
                f"argument, request must be second ({where})"
            )
            return None
        if not (listed or is_request_annotation(second)):
            problems.append(
                f"`{name}` method with two arguments must have request as second argument "
                f"(type annotated with starlette.requests.Request) ({where})"
            )
            return None
        return TrussMethod(name, True, True, is_async, is_generator, first, listed)
    problems.append(f"`{name}` method cannot have more than two arguments ({where})")
    return None


def _init_kwargs(cls: type) -> tuple[str, ...]:
    try:
        params = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return ()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return INIT_KWARGS
    names = {p.name for p in params}
    return tuple(k for k in INIT_KWARGS if k in names)


def inspect_truss(cls: Any) -> TrussSpec:
    """Check ``cls`` by Truss's rules; one ``DefinitionError`` listing every problem."""
    if not isinstance(cls, type):
        raise DefinitionError(f"'{cls!r}' is not a class")
    problems: list[str] = []
    pre = _method(cls, "preprocess", problems)
    predict = _method(cls, "predict", problems)
    post = _method(cls, "postprocess", problems)
    healthy = _method(cls, "is_healthy", problems)
    websocket = _method(cls, "websocket", problems)
    endpoints = {n: m for n in ENDPOINT_METHODS if (m := _method(cls, n, problems)) is not None}
    if healthy is not None and (healthy.takes_inputs or healthy.takes_request):
        problems.append("`is_healthy` must have only one argument: `self`.")
    if websocket is not None and (predict or pre or post):
        problems.append(
            "Truss model cannot have both `websocket` and any of `predict`, `preprocess`, or "
            "`postprocess` methods."
        )
    elif websocket is None and predict is None and getattr(cls, "predict", None) is None:
        problems.append("Truss model must have a `predict` or `websocket` method.")
    elif websocket is not None:
        if not websocket.takes_inputs or websocket.takes_request:
            problems.append("`websocket` must have only one argument: `websocket`.")
        if not websocket.is_async:
            problems.append("`websocket` endpoints must be async function definitions.")
    elif predict is not None:
        if pre is not None and predict.takes_request and not predict.takes_inputs:
            problems.append(
                "When using `preprocess`, the predict method cannot only have the request "
                "argument (because the result of `preprocess` would be discarded)."
            )
        if post is not None and post.takes_request and not post.takes_inputs:
            problems.append(
                "The `postprocess` method cannot only have the request argument (because the "
                "result of `predict` would be discarded)."
            )
    for spec in (pre, post, healthy):
        if spec is not None and spec.is_generator:
            problems.append(f"`{spec.name}` must not be a generator; only predict may stream")
    load = getattr(cls, "load", None)
    if load is not None and not callable(load):
        problems.append("`load` must be a method")
    DefinitionError.check(problems)
    first = pre or predict
    annotation = first.input_annotation if first is not None else None
    input_schema = annotation if is_schema_annotation(annotation) else None
    schema = io_schema(cls, pre, predict, post) if predict is not None else None
    return TrussSpec(
        cls,
        pre,
        predict,
        post,
        healthy,
        websocket,
        endpoints,
        _init_kwargs(cls),
        input_schema,
        schema,
    )


def io_schema(
    cls: type, pre: TrussMethod | None, predict: TrussMethod, post: TrussMethod | None
) -> dict[str, Any] | None:
    """Truss's ``/schema`` answer (``TrussSchema.serialize``), or None when the annotations
    say nothing of the input and output."""
    first = pre or predict
    input_type = first.input_annotation if is_schema_annotation(first.input_annotation) else None
    last = getattr(cls, (post or predict).name)
    returns = _hints(last).get("return")
    output_type, streaming = _output(returns)
    if input_type is None and output_type is None and streaming is None:
        return None
    return {
        "input_schema": input_type.model_json_schema() if input_type is not None else None,
        "output_schema": output_type.model_json_schema() if output_type is not None else None,
        "supports_streaming": streaming,
    }


def _is_generator_type(annotation: Any) -> bool:
    origin = typing.get_origin(annotation)
    return isinstance(origin, type) and issubclass(
        origin, (Generator, AsyncGenerator, Iterator, AsyncIterator)
    )


def _output(annotation: Any) -> tuple[Any, bool | None]:
    """Truss's four cases: a pydantic model; a generator; an awaitable of a pydantic model; a
    union of a pydantic model and a generator. Else nothing."""
    if annotation is None:
        return None, None
    if is_schema_annotation(annotation):
        return annotation, False
    if _is_generator_type(annotation):
        return None, True
    if _is_awaitable(annotation):
        awaited = _awaited(annotation)
        return (awaited, False) if is_schema_annotation(awaited) else (None, None)
    if typing.get_origin(annotation) is typing.Union:
        args = typing.get_args(annotation)
        models = [_awaited(a) if _is_awaitable(a) else a for a in args]
        models = [m for m in models if is_schema_annotation(m)]
        generators = [a for a in args if _is_generator_type(a)]
        if len(args) == 2 and len(models) == 1 and len(generators) == 1:
            return models[0], True
    return None, None


def _is_awaitable(annotation: Any) -> bool:
    origin = typing.get_origin(annotation)
    return isinstance(origin, type) and issubclass(origin, Awaitable)


def _awaited(annotation: Any) -> Any:
    args = typing.get_args(annotation)
    return args[0] if len(args) == 1 else None
