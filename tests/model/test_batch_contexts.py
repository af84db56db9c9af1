"""A stateful sequence model's batched ``predict`` may annotate its Context parameter as what
it gets: the list of the batch's Contexts (``list[Context]``, ``typing.List[Context]``,
``Sequence[Context]`` from ``collections.abc`` or ``typing``; a subclass as element too), optional
as ``Context | None`` is (``list[Context] | None``, ``list[Context | None]``). The plain
``Context`` keeps working there. Where one Context comes (no batching; preprocess and
postprocess) the list is refused at load, naming the method, the parameter and what to change.

The request's list is optional the same way: ``list[Request] | None``.

No ``from __future__ import annotations``: the classes are made with real annotation objects,
as in a user's model file without the future import.
"""

import asyncio
import collections.abc
import typing
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Optional

import pytest
from starlette.requests import Request

from podium.config import ModelConfig
from podium.errors import DefinitionError
from podium.model._forms import context_form
from podium.model.native import NativeModel, check_config, inspect_class
from podium.types import Context, current_context

SubContext = type("SubContext", (Context,), {})
Other = type("Context", (), {"__module__": "podium.types"})  # another import of podium.types

LISTS = [
    list[Context],
    typing.List[Context],  # noqa: UP006
    collections.abc.Sequence[Context],
    typing.Sequence[Context],  # noqa: UP006
    list[SubContext],
    list[Other],
]

OPTIONAL_LISTS = [
    list[Context] | None,
    Optional[list[Context]],  # noqa: UP045
    list[Context | None],
    typing.Sequence[Optional[Context]],  # noqa: UP006, UP045
    list[Context | None] | None,
]

#: what a Context parameter is not, as a list or otherwise
NOT_CONTEXTS = [
    list[list[Context]],
    dict[str, Context],
    tuple[Context, ...],
    list[Context] | int,
    list[Context | int],
    list[int],
    list,
    None,
]

SEQUENCE_BATCHED = {"batch_size": 4, "sequence_batching": True}


def config(raw: dict[str, Any]) -> ModelConfig:
    return ModelConfig.from_mapping(raw, default_name="m", where="m")


def with_contexts(annotation: Any, *, name: str = "predict", request: Any = None) -> type:
    """A model class whose ``name`` method takes the inputs (and a request annotated
    ``request``, if given), then ``contexts`` annotated ``annotation``; with a plain predict of
    its own when ``name`` is another method."""
    if request is None:

        def method(self: Any, batch: Any, contexts: Any) -> Any:
            return batch

        method.__annotations__ = {"contexts": annotation}
    else:

        def method(self: Any, batch: Any, requests: Any, contexts: Any) -> Any:
            return batch

        method.__annotations__ = {"requests": request, "contexts": annotation}
    body: dict[str, Any] = {name: method}
    if name != "predict":
        body["predict"] = lambda self, batch: batch
    return type("Model", (), body)


def refusals(cls: type, raw: dict[str, Any]) -> list[str]:
    with pytest.raises(DefinitionError) as caught:
        check_config(inspect_class(cls), config(raw))
    return caught.value.problems


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(2, thread_name_prefix="test-model") as pool:
        yield pool


# -- the forms ----------------------------------------------------------------------------------


@pytest.mark.parametrize("annotation", LISTS)
def test_each_spelling_of_a_list_of_contexts_is_one(annotation: Any) -> None:
    assert context_form(annotation) == (False, True)


@pytest.mark.parametrize("annotation", OPTIONAL_LISTS)
def test_an_optional_list_of_contexts_is_optional(annotation: Any) -> None:
    assert context_form(annotation) == (True, True)


def test_the_plain_context_as_before() -> None:
    assert context_form(Context) == (False, False)
    assert context_form(SubContext) == (False, False)
    assert context_form(Context | None) == (True, False)


@pytest.mark.parametrize("annotation", NOT_CONTEXTS)
def test_other_annotations_ask_for_no_context(annotation: Any) -> None:
    assert context_form(annotation) is None


# -- accepted -----------------------------------------------------------------------------------


@pytest.mark.parametrize("request_annotation", [None, Request, list[Request]])
@pytest.mark.parametrize("annotation", LISTS)
def test_a_sequence_models_batched_predict_takes_the_list(
    annotation: Any, request_annotation: Any
) -> None:
    spec = inspect_class(with_contexts(annotation, request=request_annotation))
    assert spec.predict is not None
    assert spec.predict.takes_context and not spec.predict.context_optional
    assert spec.predict.context_list == "contexts"
    assert spec.predict.takes_request is (request_annotation is not None)
    check_config(spec, config(SEQUENCE_BATCHED))  # no problem


@pytest.mark.parametrize("raw", [SEQUENCE_BATCHED, {"batch_size": 4}])
@pytest.mark.parametrize("annotation", OPTIONAL_LISTS)
def test_an_optional_list_also_runs_without_sequences(annotation: Any, raw: dict[str, Any]) -> None:
    spec = inspect_class(with_contexts(annotation))
    assert spec.predict is not None
    assert spec.predict.context_optional and spec.predict.context_list == "contexts"
    check_config(spec, config(raw))


def test_a_list_of_contexts_without_sequences_needs_them() -> None:
    (problem,) = refusals(with_contexts(list[Context]), {"batch_size": 4})
    assert problem.startswith("Model.predict takes a Context but model 'm' does not set ")


@pytest.mark.parametrize("annotation", [Context, Context | None])
def test_the_plain_context_on_a_batched_predict_as_before(annotation: Any) -> None:
    spec = inspect_class(with_contexts(annotation))
    assert spec.predict is not None
    assert spec.predict.takes_context and spec.predict.context_list is None
    check_config(spec, config(SEQUENCE_BATCHED))


def test_the_list_reaches_a_sync_predict_in_its_thread(executor: ThreadPoolExecutor) -> None:
    class Model:
        def predict(self, batch: list, contexts: list[Context]) -> list:
            return [f"{c.sequence_id}:{x}" for x, c in zip(batch, contexts, strict=True)]

    model = NativeModel(
        inspect_class(Model),
        config(SEQUENCE_BATCHED),
        model_dir=Path("/srv/m"),
        secrets={},
        executor=executor,
    )

    async def batch() -> Any:
        current_context.set(
            [Context("a", first=True, state={}), Context("b", first=False, state={})]
        )
        return await model.predict([1, 2], [None, None])

    assert asyncio.run(batch()) == ["a:1", "b:2"]


# -- refused ------------------------------------------------------------------------------------


@pytest.mark.parametrize("annotation", LISTS)
def test_a_list_of_contexts_on_an_unbatched_predict_is_refused(
    annotation: Any, executor: ThreadPoolExecutor
) -> None:
    raw = {"sequence_batching": True}  # batch_size 1
    (problem,) = refusals(with_contexts(annotation), raw)
    assert problem == (
        "Model.predict: its Context parameter 'contexts' is annotated as a list of Contexts, "
        "which only a batched predict gets; model 'm' does not batch predict, so it gets one "
        "Context: annotate it podium.Context (or set batch_size above 1 to batch it)"
    )
    spec = inspect_class(with_contexts(annotation))
    with pytest.raises(DefinitionError, match="'contexts' is annotated as a list of Contexts"):
        NativeModel(spec, config(raw), model_dir=Path("/srv/m"), secrets={}, executor=executor)


@pytest.mark.parametrize("annotation", OPTIONAL_LISTS)
def test_an_optional_list_where_one_comes_names_the_optional_context(annotation: Any) -> None:
    (problem,) = refusals(with_contexts(annotation), {})
    assert problem.endswith(
        "so it gets one Context: annotate it podium.Context | None "
        "(or set batch_size above 1 to batch it)"
    )


@pytest.mark.parametrize("method", ["preprocess", "postprocess"])
@pytest.mark.parametrize("annotation", LISTS)
def test_a_list_of_contexts_on_a_per_request_method_is_refused(
    method: str, annotation: Any
) -> None:
    (problem,) = refusals(with_contexts(annotation, name=method), SEQUENCE_BATCHED)
    assert problem == (
        f"Model.{method}: its Context parameter 'contexts' is annotated as a list of Contexts, "
        f"which only a batched predict gets; {method} runs once per request, so it gets one "
        "Context: annotate it podium.Context"
    )


def test_both_lists_where_one_comes_are_both_named() -> None:
    cls = with_contexts(list[Context], request=list[Request])
    assert [p.split(":")[1] for p in refusals(cls, {"sequence_batching": True})] == [
        " its request parameter 'requests' is annotated as a list of requests, which only a "
        "batched predict gets; model 'm' does not batch predict, so it gets one request",
        " its Context parameter 'contexts' is annotated as a list of Contexts, which only a "
        "batched predict gets; model 'm' does not batch predict, so it gets one Context",
    ]


def test_the_list_of_contexts_still_comes_last() -> None:
    class Model:
        def predict(self, batch: Any, contexts: list[Context], requests: Request) -> Any:
            return batch

    with pytest.raises(DefinitionError, match="the Context parameter 'contexts' must come last"):
        inspect_class(Model)


@pytest.mark.parametrize("annotation", NOT_CONTEXTS[:-1])
def test_other_annotations_of_the_last_parameter_stay_refused(annotation: Any) -> None:
    with pytest.raises(DefinitionError, match="'contexts' must be the request"):
        inspect_class(with_contexts(annotation))


# -- list[Request] | None -----------------------------------------------------------------------

OPTIONAL_REQUESTS = [list[Request] | None, Optional[typing.List[Request]]]  # noqa: UP006, UP045


@pytest.mark.parametrize("annotation", OPTIONAL_REQUESTS)
def test_an_optional_list_of_requests_is_the_list_for_a_batched_predict(annotation: Any) -> None:
    class Model:
        def predict(self, batch: Any, requests: Any) -> Any:
            return batch

    Model.predict.__annotations__ = {"requests": annotation}
    spec = inspect_class(Model)
    assert spec.predict is not None
    assert spec.predict.takes_request and spec.predict.request_list == "requests"
    check_config(spec, config({"batch_size": 4}))
    with pytest.raises(DefinitionError) as caught:
        check_config(spec, config({}))
    (problem,) = caught.value.problems
    assert problem == (
        "Model.predict: its request parameter 'requests' is annotated as a list of requests, "
        "which only a batched predict gets; model 'm' does not batch predict, so it gets one "
        "request: annotate it starlette.requests.Request (or set batch_size above 1 to batch it)"
    )
