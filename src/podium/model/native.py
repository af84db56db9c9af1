"""The native model contract (after Truss): a plain class with load/preprocess/predict/postprocess.

``inspect_class`` checks every rule of the contract when the model is loaded and reports all
problems at once, each naming the method and the rule; ``check_config`` adds the rules that
depend on the model's settings. ``NativeModel`` wraps an instance as a
:class:`podium.types.ModelInstance`.

A method takes the inputs, the request, or both, in that order, and may take a
:class:`podium.types.Context` last (a stateful sequence's context, read from
``podium.types.current_context`` on the event loop when the method is called). A batched
``predict`` gets the list of the requests, and in a sequence model's batches the list of their
Contexts, and may say so (``list[Request]``, ``list[Context]``); where one request comes, those
annotations are refused (``check_config``).

A model with ``continuous_batching: true`` defines ``step(self, batch)`` (sync or async) over a
list of :class:`podium.types.Generation` and may omit ``predict``, and has no ``postprocess``
(``check_config``: docs/continuous.md). OpenAI's API: ``model/_openai.py``.
"""

from __future__ import annotations

import enum
import inspect
import typing
from collections.abc import AsyncGenerator, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import ModelConfig
from ..errors import DefinitionError
from ..types import (
    Capabilities,
    EmbedInputs,
    Generation,
    InputKind,
    MethodInputs,
    OpenAIFace,
    current_context,
)
from ._adapter import Adapter
from ._calls import (
    call_method,
    defining,
    iterate_async,
    iterate_sync,
    model_error,
    one_parameter,
    run_sync,
    validated,
    validation_failed,
)
from ._forms import (
    batched_predict,
    context_form,
    input_form,
    is_request_annotation,
    one_context_lists,
    one_request_lists,
    raw_requests_batch,
    requests_batch,
)
from ._openai import METHODS, check_embed, openai_call, openai_face, run_openai

__all__ = [
    "MethodSpec",
    "ModelSpec",
    "NativeModel",
    "check_config",
    "inspect_class",
    "method_parameters",
]

INIT_KWARGS = ("config", "data_dir", "secrets")


class Flavor(enum.Enum):
    SYNC = "sync"
    ASYNC = "async"
    GENERATOR = "generator"
    ASYNC_GENERATOR = "async generator"


#: Read off the enum once, for :meth:`NativeModel._call` (every request): on Python 3.11 each
#: read of a member off its class goes through the enum type's ``__getattr__`` hook, which costs
#: as much as a function call.
_ASYNC = Flavor.ASYNC


@dataclass(frozen=True, slots=True)
class MethodSpec:
    """How to call one of preprocess/predict/postprocess."""

    name: str
    flavor: Flavor
    takes_inputs: bool
    takes_request: bool
    input_annotation: Any = None
    #: takes a :class:`podium.types.Context` as its last parameter
    takes_context: bool = False
    #: ... annotated ``Context | None``: the model also runs without ``sequence_batching``
    context_optional: bool = False
    #: the request parameter's name where it is annotated as a list of requests
    #: (``list[Request]``): right only for a batched predict (``check_config``)
    request_list: str | None = None
    #: the Context parameter's name where it is annotated as a list of Contexts
    #: (``list[Context]``): right only for a batched predict (``check_config``)
    context_list: str | None = None

    @property
    def streaming(self) -> bool:
        return self.flavor in (Flavor.GENERATOR, Flavor.ASYNC_GENERATOR)


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """The checked shape of a model class."""

    cls: type
    preprocess: MethodSpec | None
    predict: MethodSpec | None  # None only for a class with a step method (continuous batching)
    postprocess: MethodSpec | None
    has_load: bool
    init_kwargs: tuple[str, ...]
    init_takes_any: bool
    input_kind: InputKind
    input_schema: type | None

    @property
    def needs_inputs(self) -> bool:
        first = self.preprocess or self.predict
        return first is None or first.takes_inputs

    @property
    def needs_request(self) -> bool:
        return any(m is not None and m.takes_request for m in self.methods())

    def methods(self) -> tuple[MethodSpec | None, ...]:
        return (self.preprocess, self.predict, self.postprocess)

    def input_form(self, config: ModelConfig) -> tuple[InputKind, type | None]:
        """What one request's payload becomes under ``config``: :attr:`input_kind` and
        :attr:`input_schema`, but for a batched ``predict`` (nothing before it: a
        ``preprocess`` takes one request) that names its list, as in ``list[InferenceRequest]``
        or ``list[Order]``: then each request's is what the list's element asks for."""
        if self.preprocess is None and self.predict is not None and batched_predict(config):
            return input_form(self.predict.input_annotation, batched=True)
        return self.input_kind, self.input_schema


def _flavor(fn: Any) -> Flavor:
    if inspect.isasyncgenfunction(fn):
        return Flavor.ASYNC_GENERATOR
    if inspect.isgeneratorfunction(fn):
        return Flavor.GENERATOR
    if inspect.iscoroutinefunction(fn):
        return Flavor.ASYNC
    return Flavor.SYNC


def _hints(fn: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn)
    except Exception:  # some string annotation does not resolve: resolve the others one by one
        pass
    raw = dict(getattr(fn, "__annotations__", {}))
    namespace = getattr(inspect.unwrap(getattr(fn, "__func__", fn)), "__globals__", {})
    hints: dict[str, Any] = {}
    for name, annotation in raw.items():

        def probe() -> None: ...

        probe.__annotations__ = {"value": annotation}
        try:
            hints[name] = typing.get_type_hints(probe, globalns=namespace)["value"]
        except Exception:  # e.g. a name imported only under TYPE_CHECKING
            hints[name] = annotation
    return hints


def method_parameters(
    cls: type, name: str, problems: list[str]
) -> tuple[Any, list[inspect.Parameter], dict[str, Any]] | None:
    """The method ``name`` of ``cls``, its parameters after the instance's and its type hints;
    None when the class has no such attribute, or when it is no method (the problem is
    added)."""
    fn = getattr(cls, name, None)
    if fn is None:
        return None
    where = f"{cls.__name__}.{name}"
    if not callable(fn):
        problems.append(f"{where} must be a method")
        return None
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        problems.append(f"{where}: its signature cannot be inspected")
        return None
    # A plain function looked up on the class still has its instance parameter, whatever its
    # name; staticmethods have none, and classmethods and callable objects come already bound.
    if params and inspect.isfunction(inspect.getattr_static(cls, name)):
        params = params[1:]
    return fn, params, _hints(fn)


def _inspect_method(cls: type, name: str, problems: list[str]) -> MethodSpec | None:
    found = method_parameters(cls, name, problems)
    if found is None:
        return None
    fn, params, hints = found
    where = f"{cls.__name__}.{name}"
    ok = True
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.KEYWORD_ONLY):
            problems.append(
                f"{where}: parameter '{p.name}' must be a plain positional parameter "
                "(a method takes the inputs, the request, or both, in that order, and may take "
                "a podium.Context last)"
            )
            ok = False
    if not ok:
        return None
    contexts = [context_form(hints.get(p.name)) for p in params]
    for p, ctx in zip(params[:-1], contexts[:-1], strict=True):
        if ctx is not None:
            problems.append(
                f"{where}: the Context parameter '{p.name}' must come last, after the inputs "
                "and/or the request"
            )
            return None
    last = contexts[-1] if contexts else None
    takes_context = last is not None
    context_optional, listed_context = last if last is not None else (False, False)
    core = params[:-1] if takes_context else params
    if len(core) > 2:
        problems.append(
            f"{where} takes {len(params)} parameters; a model method takes at most two: "
            "the inputs, then the request (and a podium.Context last)"
        )
        return None
    if not core:
        if takes_context:
            problems.append(
                f"{where} takes only a Context; it must also take the inputs, the request, or "
                "both (the Context comes last)"
            )
        else:
            problems.append(
                f"{where} takes no parameters; it must take the inputs, the request, or both"
            )
        return None
    listed = [raw_requests_batch(hints.get(p.name)) for p in core]
    is_req = [listed[i] or is_request_annotation(hints.get(p.name)) for i, p in enumerate(core)]
    takes_inputs, takes_request = True, False
    if len(core) == 1:
        if is_req[0]:
            takes_inputs, takes_request = False, True
    else:
        if is_req[0]:
            problems.append(
                f"{where}: the request parameter '{core[0].name}' must come second, after the inputs"
            )
            return None
        if not is_req[1]:
            problems.append(
                f"{where}: its second parameter '{core[1].name}' must be the request, annotated "
                "with starlette.requests.Request (or a subclass such as fastapi.Request; a "
                "batched predict's list of them as list[Request]), or the sequence's context, "
                "annotated podium.Context"
            )
            return None
        takes_request = True
    flavor = _flavor(fn)
    annotation = hints.get(core[0].name) if takes_inputs else None
    request_list = core[-1].name if takes_request and listed[-1] else None
    shape = (name, flavor, takes_inputs, takes_request, annotation, takes_context)
    context_list = params[-1].name if listed_context else None
    return MethodSpec(*shape, context_optional, request_list, context_list)


def inspect_class(cls: Any) -> ModelSpec:
    """Check ``cls`` against the native contract; raise one ``DefinitionError`` listing every problem."""
    problems: list[str] = []
    if not isinstance(cls, type):
        raise DefinitionError(f"'{cls!r}' is not a class")
    pre = _inspect_method(cls, "preprocess", problems)
    predict = _inspect_method(cls, "predict", problems)
    post = _inspect_method(cls, "postprocess", problems)
    name = cls.__name__
    if all(getattr(cls, m, None) is None for m in ("predict", "step", "embed", *METHODS)):
        problems.append(
            f"{name} has no predict method; predict is required (or step, for a model with "
            "continuous_batching: true; or embed, chat, complete for OpenAI's API only)"
        )
    check_embed(cls, problems)
    for spec in (pre, post):
        if spec is not None and spec.streaming:
            problems.append(
                f"{name}.{spec.name} is a {spec.flavor.value}; only predict may be a generator"
            )
    if pre is not None and predict is not None and not predict.takes_inputs:
        problems.append(
            f"{name}.preprocess cannot be combined with a predict that takes only the request: "
            "the result of preprocess would be discarded"
        )
    if post is not None and not post.takes_inputs:
        problems.append(
            f"{name}.postprocess takes only the request; it must take the outputs of predict"
        )
    if post is not None and predict is not None and predict.streaming:
        problems.append(
            f"{name}.predict is a {predict.flavor.value} (streaming) and cannot be combined with "
            "postprocess: each streamed item goes straight to the client"
        )
    load = getattr(cls, "load", None)
    if load is not None and not callable(load):
        problems.append(f"{name}.load must be a method")
    elif load is not None and (
        inspect.isgeneratorfunction(load) or inspect.isasyncgenfunction(load)
    ):
        problems.append(f"{name}.load must not be a generator")
    init_kwargs, init_any = _inspect_init(cls, problems)
    DefinitionError.check(problems)
    first = pre or predict
    kind, schema = input_form(first.input_annotation if first is not None else None)
    return ModelSpec(cls, pre, predict, post, load is not None, init_kwargs, init_any, kind, schema)


def check_config(spec: ModelSpec, config: ModelConfig, where: str | None = None) -> None:
    """The rules that depend on the model's settings; one ``DefinitionError`` listing each.

    A method that takes a ``Context`` needs ``sequence_batching: true``: without it there is no
    sequence, and the model would get None where it declared a Context. ``Context | None``
    declares that the model also runs without sequences. A list of requests or of Contexts is
    what a batched ``predict`` gets, and refused where one request comes (``_forms``).
    ``continuous_batching: true`` needs a ``step`` method (see :func:`_check_continuous`);
    without it, ``predict`` is required.
    """
    problems: list[str] = []
    if not config.sequence_batching:
        problems += [
            f"{spec.cls.__name__}.{m.name} takes a Context but model '{config.name}' does not set "
            "sequence_batching: true; a Context exists only for the requests of a stateful "
            "sequence (annotate it 'Context | None' to run without sequences too)"
            for m in spec.methods()
            if m is not None and m.takes_context and not m.context_optional
        ]
    if config.continuous_batching and config.sequence_batching:
        problems += _check_overlapping(spec, config)
    elif config.continuous_batching:
        problems += _check_continuous(spec, config)
    elif spec.predict is None and not _openai_only(spec.cls):
        problems.append(
            f"{spec.cls.__name__} has no predict method; predict is required (a step method "
            f"serves only with continuous_batching: true, which model '{config.name}' does not set)"
        )
    first = spec.preprocess or spec.predict
    if first is not None and requests_batch(first.input_annotation):
        if spec.preprocess is not None or not batched_predict(config):
            problems.append(
                f"{spec.cls.__name__}.{first.name} is annotated as a list of InferenceRequest, "
                f"which only a batched predict gets; model '{config.name}' gives it one request "
                "(set batch_size above 1, or annotate it InferenceRequest)"
            )
    problems += one_request_lists(spec.cls, spec.methods(), config)
    problems += one_context_lists(spec.cls, spec.methods(), config)
    if problems:
        if where:
            problems = [f"{where}: {p}" for p in problems]
        raise DefinitionError.of(problems)


def _openai_only(cls: type) -> bool:
    return any(getattr(cls, m, None) is not None for m in ("embed", *METHODS))


def _check_overlapping(spec: ModelSpec, config: ModelConfig) -> list[str]:
    """``continuous_batching`` with ``sequence_batching``: a sequence's next request runs while
    its previous one still streams (to cancel it, say). That needs a streaming ``predict`` and
    room for two predicts at once."""
    name = spec.cls.__name__
    rule = f"model '{config.name}' sets continuous_batching and sequence_batching"
    if spec.predict is None or not spec.predict.streaming:
        return [
            f"{name}.predict must be a generator: {rule}, so that a sequence's next request "
            "can run while its previous one streams"
        ]
    if config.predict_concurrency < 2:
        return [
            f"{rule}: predict_concurrency must be at least 2, so that a request can run while "
            f"another of its sequence streams (it is {config.predict_concurrency})"
        ]
    return []


def _check_continuous(spec: ModelSpec, config: ModelConfig) -> list[str]:
    """``step(self, batch)``: one positional parameter, a plain or async method (it emits items
    with ``Generation.emit``, it does not yield them); no ``postprocess``."""
    cls, name = spec.cls, spec.cls.__name__
    rule = f"model '{config.name}' sets continuous_batching: true"
    problems: list[str] = []
    fn = getattr(cls, "step", None)
    if fn is None:
        problems.append(
            f"{name} has no step method; {rule}, which needs step(self, batch) to advance the "
            "active requests (a list of podium.Generation) by one step"
        )
    elif not callable(fn):
        problems.append(f"{name}.step must be a method")
    else:
        flavor = _flavor(fn)
        if flavor in (Flavor.GENERATOR, Flavor.ASYNC_GENERATOR):
            problems.append(
                f"{name}.step is a {flavor.value}; step must be a plain or async method that "
                "streams each request's items with g.emit(item), not yield them"
            )
        count = one_parameter(cls, "step")
        if count is not None:
            problems.append(
                f"{name}.step must take exactly one parameter, the batch (a list of "
                f"podium.Generation); it takes {count}"
            )
    if spec.postprocess is not None:
        problems.append(
            f"{name}.postprocess cannot be combined with continuous_batching ({rule}): each "
            "request streams the items step emits and has no single result to postprocess"
        )
    return problems


def _inspect_init(cls: type, problems: list[str]) -> tuple[tuple[str, ...], bool]:
    init: Any = vars(cls).get("__init__") or getattr(cls, "__init__")  # noqa: B009
    if init is object.__init__:
        return (), False
    try:
        params = list(inspect.signature(init).parameters.values())[1:]
    except (TypeError, ValueError):
        return (), False
    names: list[str] = []
    takes_any = False
    for p in params:
        if p.kind == p.VAR_KEYWORD:
            takes_any = True
        elif p.kind == p.VAR_POSITIONAL:
            continue
        elif p.name in INIT_KWARGS:
            names.append(p.name)
        elif p.default is p.empty:
            problems.append(
                f"{cls.__name__}.__init__ parameter '{p.name}' is not one Podium provides "
                f"({', '.join(INIT_KWARGS)})"
            )
    return tuple(names), takes_any


class NativeModel(Adapter):
    """A native model instance behind the :class:`podium.types.ModelInstance` interface."""

    def __init__(
        self,
        spec: ModelSpec,
        config: ModelConfig,
        *,
        model_dir: Path,
        secrets: Mapping[str, str],
        executor: Executor,
    ) -> None:
        check_config(spec, config)
        self.spec = spec
        self.name = config.name
        kind, self._schema = spec.input_form(config)
        self._executor = executor
        available = {"config": config.raw, "data_dir": model_dir / "data", "secrets": secrets}
        wanted = INIT_KWARGS if spec.init_takes_any else spec.init_kwargs
        kwargs = {k: available[k] for k in wanted}
        with defining(f"model '{self.name}': {spec.cls.__name__}.__init__"):
            self.obj = spec.cls(**kwargs)
        # served by continuous batching: the scheduler calls ``step``, never ``predict``
        # (with sequence_batching, continuous_batching means overlapping requests of a
        # sequence, served by the sequence scheduler: a streaming predict, not a step)
        continuous = config.continuous_batching and not config.sequence_batching
        self._step: Any = getattr(self.obj, "step", None) if continuous else None
        self._step_async = inspect.iscoroutinefunction(self._step)
        if continuous:
            streaming = True  # each request streams the items step emits for it
            in_thread = not self._step_async
        else:  # check_config: predict is required, unless the model only embeds
            streaming = spec.predict is not None and spec.predict.streaming
            in_thread = spec.predict is not None and spec.predict.flavor is Flavor.SYNC
        self.capabilities = Capabilities(
            needs_inputs=spec.needs_inputs,
            needs_request=spec.needs_request,
            input_kind=kind,
            input_schema=self._schema,
            streaming=streaming,
            has_preprocess=spec.preprocess is not None,
            has_postprocess=spec.postprocess is not None,
            predict_in_thread=in_thread,
            continuous=continuous,
            embeds=callable(getattr(self.obj, "embed", None)),
        )
        self._pre = self._bind(spec.preprocess)
        self._predict = self._bind(spec.predict)
        self._post = self._bind(spec.postprocess)
        self._continuous = continuous
        #: What the model offers OpenAI's API, once loaded (model/_openai.py); before, whether
        #: it may offer something (a continuous model, one that embeds)
        self.openai: OpenAIFace | None = None
        self.may_serve_openai = continuous or _openai_only(spec.cls)
        # a sync predict (or step) runs on threads of the instance's own, as many as its slots
        # let run at once; they hand calls back to the loop more cheaply than the shared pool
        # (model/_threads.py), and a thread worker times its calls there
        self._own_threads(in_thread)

    def _bind(self, spec: MethodSpec | None) -> Any:
        return None if spec is None else getattr(self.obj, spec.name)

    @staticmethod
    def _args(spec: MethodSpec, inputs: Any, request: Any) -> tuple[Any, ...]:
        if spec.takes_inputs and spec.takes_request:
            args: tuple[Any, ...] = (inputs, request)
        else:
            args = (inputs,) if spec.takes_inputs else (request,)
        if spec.takes_context:
            # read here, in the caller's task: sync code runs in a pool thread, which does not
            # see the task's context variables
            args = (*args, current_context.get())
        return args

    async def load(self) -> None:
        """Run the model's ``load()``: async on the loop, sync in the thread pool."""
        load = getattr(self.obj, "load", None)
        if load is not None:  # in this task's context: the metrics it creates are this version's
            await call_method(load, executor=self._executor)
        self.openai = openai_face(self.obj, self.name, self._continuous)

    async def _call(self, spec: MethodSpec, fn: Any, inputs: Any, request: Any) -> Any:
        """Call ``fn`` (preprocess, predict or postprocess, as ``spec`` says it is called):
        async on the loop, a sync predict on the instance's threads, other sync methods in the
        pool; what it raises becomes a ``ModelError`` naming the model and the method."""
        if spec.takes_context or not spec.takes_inputs:
            args = self._args(spec, inputs, request)
        else:  # (inputs[, request]), the common case, without a call of its own
            args = (inputs, request) if spec.takes_request else (inputs,)
        try:
            if spec.flavor is _ASYNC:
                return await fn(*args)
            if fn is self._predict:
                return await self._threads.run(fn, *args)
            return await run_sync(self._executor, fn, *args)
        except Exception as exc:
            raise model_error(self.name, spec.name, exc) from exc

    def validate(self, value: Any) -> Any:
        """Validate JSON-like ``value`` into the model's pydantic schema (400 with locations)."""
        try:
            return validated(self._schema, value)
        except Exception as exc:
            failed = validation_failed(exc, f"model '{self.name}': input failed validation")
            if failed is None:
                raise
            raise failed from exc

    async def preprocess(self, inputs: Any, request: Any) -> Any:
        if self.spec.preprocess is None or type(inputs) in (EmbedInputs, MethodInputs):
            return inputs
        return await self._call(self.spec.preprocess, self._pre, inputs, request)

    def _predict_spec(self) -> MethodSpec:
        if self.spec.predict is None:
            raise RuntimeError(
                f"model '{self.name}' has no predict; it is served by continuous batching (step)"
            )
        return self.spec.predict

    async def predict(self, inputs: Any, request: Any) -> Any:
        # The one coroutine between the worker and the model's own: what :meth:`_call` does
        # for predict, inline (each level of await, and each call, costs every request a
        # frame), with the OpenAI calls' test (``openai_call``) inline for one request's.
        kind = type(inputs)
        if kind is MethodInputs or kind is EmbedInputs or (kind is list and openai_call(inputs)):
            run, executor = self._threads.run, self._executor
            return await run_openai(
                self.obj, inputs, run, executor, self._predict_list, self.name, request
            )
        # (the spec's own attribute: _predict_spec, a call of its own, only to raise)
        spec = self.spec.predict or self._predict_spec()
        if spec.takes_context or not spec.takes_inputs:
            args = self._args(spec, inputs, request)
        else:
            args = (inputs, request) if spec.takes_request else (inputs,)
        try:
            if spec.flavor is _ASYNC:
                return await self._predict(*args)
            return await self._threads.run(self._predict, *args)
        except Exception as exc:
            raise model_error(self.name, "predict", exc) from exc

    async def _predict_list(self, inputs: list[Any], requests: Any) -> Any:
        return await self._call(self._predict_spec(), self._predict, inputs, requests)

    async def step(self, batch: list[Generation]) -> None:
        """Advance ``batch`` one step: an async ``step`` on the loop, a sync one in the pool.
        What it raises becomes a ``ModelError`` naming the model and ``step``."""
        if self._step is None:
            raise RuntimeError(f"model '{self.name}' does not set continuous_batching: true")
        try:
            if self._step_async:
                await self._step(batch)
            else:
                await self._threads.run(self._step, batch)
        except Exception as exc:
            raise model_error(self.name, "step", exc) from exc

    def predict_stream(self, inputs: Any, request: Any) -> AsyncGenerator[Any, None]:
        spec = self._predict_spec()
        try:  # a generator function: creating the generator runs no user code
            gen = self._predict(*self._args(spec, inputs, request))
        except Exception as exc:
            raise model_error(self.name, "predict", exc) from exc
        if spec.flavor is Flavor.ASYNC_GENERATOR:
            return iterate_async(gen, self.name)
        return iterate_sync(gen, self._executor, self.name)

    async def postprocess(self, outputs: Any, request: Any) -> Any:
        if self.spec.postprocess is None:
            return outputs
        return await self._call(self.spec.postprocess, self._post, outputs, request)
