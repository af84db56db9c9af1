"""A native model asks for its stateful sequence's Context: podium.model.native.

No ``from __future__ import annotations``: the model classes are defined inside the tests and
their annotations must be real objects (see test_native_contract.py).
"""

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Optional

import pytest
from starlette.requests import Request

from podium import Context as PublicContext
from podium.config import ModelConfig
from podium.errors import DefinitionError
from podium.model.native import NativeModel, check_config, inspect_class
from podium.types import Context, current_context


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(4, thread_name_prefix="test-ctx") as pool:
        yield pool


def make(cls: type, executor: ThreadPoolExecutor, **config: Any) -> NativeModel:
    config.setdefault("sequence_batching", True)
    return NativeModel(
        inspect_class(cls),
        ModelConfig(name="m", **config),
        model_dir=Path("/srv/models/m"),
        secrets={},
        executor=executor,
    )


def only_problem(cls: type) -> str:
    with pytest.raises(DefinitionError) as info:
        inspect_class(cls)
    assert len(info.value.problems) == 1, info.value.problems
    return info.value.problems[0]


def ctx(sequence_id: str = "s1", first: bool = True) -> Context:
    return Context(sequence_id, first=first, state={})


async def with_context(value: Any, call: Any) -> Any:
    token = current_context.set(value)
    try:
        return await call()
    finally:
        current_context.reset(token)


async def gather(agen: Any) -> list[Any]:
    return [item async for item in agen]


# -- where a Context may be --------------------------------------------------------------------


def test_public_context_is_the_types_class() -> None:
    assert PublicContext is Context


def test_each_allowed_position_is_recognised() -> None:
    class InputsContext:
        def predict(self, inputs, context: Context): ...

    class InputsRequestContext:
        def predict(self, inputs, request: Request, context: Context): ...

    class RequestContext:
        def predict(self, request: Request, context: Context): ...

    class NoContext:
        def predict(self, inputs): ...

    a = inspect_class(InputsContext).predict
    assert (a.takes_inputs, a.takes_request, a.takes_context) == (True, False, True)
    b = inspect_class(InputsRequestContext).predict
    assert (b.takes_inputs, b.takes_request, b.takes_context) == (True, True, True)
    c = inspect_class(RequestContext).predict
    assert (c.takes_inputs, c.takes_request, c.takes_context) == (False, True, True)
    assert inspect_class(NoContext).predict.takes_context is False
    assert inspect_class(RequestContext).needs_inputs is False


def test_context_recognised_by_qualified_name_and_optional() -> None:
    Other = type("Context", (), {"__module__": "podium.types"})  # another import of podium.types

    class ByName:
        def predict(self, inputs, context: Other): ...  # type: ignore[valid-type]

    class Optional1:
        def predict(self, inputs, context: Context | None): ...

    class Optional2:
        def predict(self, inputs, context: Optional[Context]): ...  # noqa: UP045

    assert inspect_class(ByName).predict.takes_context
    assert not inspect_class(ByName).predict.context_optional
    assert inspect_class(Optional1).predict.context_optional
    assert inspect_class(Optional2).predict.context_optional


def test_context_before_the_inputs_is_an_error() -> None:
    class Model:
        def predict(self, context: Context, inputs): ...

    problem = only_problem(Model)
    assert "Model.predict" in problem and "'context'" in problem and "must come last" in problem


def test_context_before_the_request_is_an_error() -> None:
    class Model:
        def predict(self, inputs, context: Context, request: Request): ...

    problem = only_problem(Model)
    assert "Model.predict" in problem and "must come last" in problem


def test_context_alone_is_an_error() -> None:
    class Model:
        def predict(self, context: Context): ...

    problem = only_problem(Model)
    assert "Model.predict takes only a Context" in problem
    assert "the inputs, the request, or both" in problem


def test_two_contexts_is_an_error() -> None:
    class Model:
        def predict(self, inputs, a: Context, b: Context): ...

    assert "'a' must come last" in only_problem(Model)


def test_four_parameters_name_the_rule() -> None:
    class Model:
        def predict(self, inputs, request: Request, extra, context: Context): ...

    problem = only_problem(Model)
    assert "takes 4 parameters" in problem and "at most two" in problem


def test_keyword_only_context_is_an_error() -> None:
    class Model:
        def predict(self, inputs, *, context: Context): ...

    assert "plain positional parameter" in only_problem(Model)


def test_unannotated_second_parameter_mentions_the_context() -> None:
    class Model:
        def predict(self, inputs, context): ...

    problem = only_problem(Model)
    assert "must be the request" in problem and "podium.Context" in problem


# -- sequence_batching ---------------------------------------------------------------------


def test_a_context_without_sequence_batching_is_a_load_error(executor: ThreadPoolExecutor) -> None:
    class Model:
        def preprocess(self, inputs, context: Context): ...

        def predict(self, inputs, context: Context): ...

    with pytest.raises(DefinitionError) as info:
        make(Model, executor, sequence_batching=False)
    assert len(info.value.problems) == 2
    assert "Model.preprocess takes a Context" in info.value.problems[0]
    assert "sequence_batching: true" in info.value.problems[1]
    with pytest.raises(DefinitionError, match=r"^m\.py: Model\.preprocess takes a Context"):
        check_config(inspect_class(Model), ModelConfig(name="m"), "m.py")


@pytest.mark.anyio
async def test_an_optional_context_runs_without_sequences_and_gets_none(
    executor: ThreadPoolExecutor,
) -> None:
    class Model:
        def predict(self, inputs, context: Context | None):
            return context

    model = make(Model, executor, sequence_batching=False)
    assert model.spec.predict.takes_context
    assert await model.predict(1, None) is None


# -- what the methods receive ----------------------------------------------------------------


@pytest.mark.anyio
async def test_sync_method_gets_the_callers_context_in_its_thread(
    executor: ThreadPoolExecutor,
) -> None:
    seen: list[Any] = []

    class Model:
        def predict(self, inputs, context: Context):
            seen.append(threading.current_thread().name)
            context.state["n"] = context.state.get("n", 0) + inputs
            return context.state["n"]

    model = make(Model, executor)
    c = ctx()
    assert await with_context(c, lambda: model.predict(2, None)) == 2
    assert await with_context(c, lambda: model.predict(3, None)) == 5
    # ran in the model's own predict thread, not on the loop
    assert seen == ["podium-m-" + seen[0].split("-", 2)[2]] * 2
    assert seen[0] != threading.current_thread().name


@pytest.mark.anyio
async def test_async_method_with_inputs_request_and_context(
    executor: ThreadPoolExecutor,
) -> None:
    class Model:
        async def predict(self, inputs, request: Request, context: Context):
            context.headers["x-seq"] = context.sequence_id
            if inputs == "bye":
                context.end()
            return (inputs, request, context.sequence_id, context.first)

    model = make(Model, executor)
    c = ctx("abc", first=False)
    out = await with_context(c, lambda: model.predict("bye", "REQ"))
    assert out == ("bye", "REQ", "abc", False)
    assert c.headers == {"x-seq": "abc"} and c.ended


@pytest.mark.anyio
async def test_request_and_context_without_inputs(executor: ThreadPoolExecutor) -> None:
    class Model:
        def predict(self, request: Request, context: Context):
            return (request, context.sequence_id)

    model = make(Model, executor)
    assert await with_context(ctx("q"), lambda: model.predict(None, "R")) == ("R", "q")


@pytest.mark.anyio
async def test_preprocess_and_postprocess_get_the_context(executor: ThreadPoolExecutor) -> None:
    class Model:
        async def preprocess(self, inputs, context: Context):
            context.state["pre"] = inputs
            return inputs + 1

        def predict(self, inputs):
            return inputs * 10

        def postprocess(self, outputs, context: Context):
            return (context.state["pre"], outputs)

    model = make(Model, executor)
    c = ctx()

    async def run() -> Any:
        x = await model.preprocess(1, None)
        y = await model.predict(x, None)
        return await model.postprocess(y, None)

    assert await with_context(c, run) == (1, 20)


@pytest.mark.anyio
async def test_sync_generator_gets_the_context_read_when_called(
    executor: ThreadPoolExecutor,
) -> None:
    class Model:
        def predict(self, inputs, context: Context):
            for i in range(inputs):
                yield (context.sequence_id, i)
            context.end()

    model = make(Model, executor)
    c = ctx("g")
    token = current_context.set(c)
    stream = model.predict_stream(2, None)
    current_context.reset(token)  # iterated after the variable is gone: it was read at the call
    assert await gather(stream) == [("g", 0), ("g", 1)]
    assert c.ended


@pytest.mark.anyio
async def test_async_generator_gets_the_context(executor: ThreadPoolExecutor) -> None:
    class Model:
        async def predict(self, inputs, request: Request, context: Context):
            context.state.setdefault("items", []).append(inputs)
            yield list(context.state["items"])

    model = make(Model, executor)
    c = ctx()
    for value in ("a", "b"):
        token = current_context.set(c)
        stream = model.predict_stream(value, None)
        current_context.reset(token)
        out = await gather(stream)
    assert out == [["a", "b"]]


@pytest.mark.anyio
async def test_batched_predict_gets_the_list_of_contexts(executor: ThreadPoolExecutor) -> None:
    class Model:
        def predict(self, inputs, context: Context):
            assert isinstance(context, list)
            return [f"{c.sequence_id}:{x}" for x, c in zip(inputs, context, strict=True)]

    model = make(Model, executor, batch_size=4)
    contexts = [ctx("a"), ctx("b")]
    assert await with_context(contexts, lambda: model.predict([1, 2], None)) == ["a:1", "b:2"]


@pytest.mark.anyio
async def test_no_context_set_gives_none(executor: ThreadPoolExecutor) -> None:
    class Model:
        def predict(self, inputs, context: Context):
            return context

    assert await make(Model, executor).predict(1, None) is None


@pytest.mark.anyio
async def test_a_model_without_a_context_parameter_is_called_as_before(
    executor: ThreadPoolExecutor,
) -> None:
    class Model:
        def predict(self, inputs, request: Request):
            return (inputs, request)

    model = make(Model, executor)
    assert not model.spec.predict.takes_context
    assert await with_context(ctx(), lambda: model.predict(1, "R")) == (1, "R")
