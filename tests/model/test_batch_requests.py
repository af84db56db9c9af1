"""A batched ``predict`` may annotate its request parameter as what it gets: the list of the
requests (``list[Request]``, ``typing.List[Request]``, ``Sequence[Request]`` from
``collections.abc`` or ``typing``; Request being starlette's or a subclass). The plain
``Request`` keeps working there. Where one request comes (no batching; preprocess and
postprocess, which run per request; a truss's other methods) the list is refused at load,
naming the method, the parameter and what to change.

No ``from __future__ import annotations``: the classes are made with real annotation objects,
as in a user's model file without the future import.
"""

import collections.abc
import typing
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from starlette.requests import Request

from podium.config import ModelConfig
from podium.errors import DefinitionError
from podium.model import discover, truss
from podium.model._forms import raw_requests_batch
from podium.model.native import NativeModel, check_config, inspect_class

# fastapi.Request is starlette's Request re-exported from another package (not installed here)
FastAPIRequest = type("Request", (Request,), {"__module__": "fastapi"})

LISTS = [
    list[Request],
    typing.List[Request],  # noqa: UP006
    collections.abc.Sequence[Request],
    typing.Sequence[Request],  # noqa: UP006
    list[FastAPIRequest],
    collections.abc.Sequence[FastAPIRequest],
]

#: what a request parameter is not, as a list or otherwise
NOT_REQUESTS = [
    list[list[Request]],
    dict[str, Request],
    tuple[Request, ...],
    list[int],
    list,
    list[Request] | int,
]

BATCHED = [{"batch_size": 4}, {"batch_size": 4, "sequence_batching": True}]
UNBATCHED = [{}, {"batch_size": 1}]


def config(raw: dict[str, Any]) -> ModelConfig:
    return ModelConfig.from_mapping(raw, default_name="m", where="m")


def with_predict(annotation: Any, *, inputs: bool = True, name: str = "predict") -> type:
    """A model class whose ``name`` method's request parameter ``requests`` is ``annotation``
    (after the inputs, or alone); with a predict of its own when ``name`` is another method."""
    if inputs:

        def method(self: Any, batch: Any, requests: Any) -> Any:
            return batch
    else:

        def method(self: Any, requests: Any) -> Any:
            return [None] * len(requests)

    method.__annotations__ = {"requests": annotation}
    body: dict[str, Any] = {name: method}
    if name != "predict":
        body["predict"] = lambda self, batch: batch
    return type("Model", (), body)


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(2, thread_name_prefix="test-model") as pool:
        yield pool


# -- accepted -----------------------------------------------------------------------------------


@pytest.mark.parametrize("annotation", LISTS)
def test_each_spelling_of_a_list_of_requests_is_one(annotation: Any) -> None:
    assert raw_requests_batch(annotation)


@pytest.mark.parametrize("annotation", [*NOT_REQUESTS, Request, Request | None, None])
def test_other_annotations_are_no_list_of_requests(annotation: Any) -> None:
    assert not raw_requests_batch(annotation)


@pytest.mark.parametrize("raw", BATCHED)
@pytest.mark.parametrize("inputs", [True, False], ids=["inputs-and-requests", "requests-only"])
@pytest.mark.parametrize("annotation", LISTS)
def test_a_batched_predict_takes_the_list_of_requests(
    annotation: Any, inputs: bool, raw: dict[str, Any]
) -> None:
    spec = inspect_class(with_predict(annotation, inputs=inputs))
    assert spec.predict is not None
    assert spec.predict.takes_request
    assert spec.predict.takes_inputs is inputs
    assert spec.predict.request_list == "requests"
    assert spec.needs_request and spec.needs_inputs is inputs
    check_config(spec, config(raw))  # no problem


@pytest.mark.parametrize("raw", [*BATCHED, *UNBATCHED])
@pytest.mark.parametrize("annotation", [Request, FastAPIRequest, Request | None])
def test_the_plain_request_is_accepted_as_before(annotation: Any, raw: dict[str, Any]) -> None:
    spec = inspect_class(with_predict(annotation))
    assert spec.predict is not None
    assert spec.predict.takes_request and spec.predict.request_list is None
    check_config(spec, config(raw))


def test_the_list_reaches_predict_as_it_is_handed_over(executor: ThreadPoolExecutor) -> None:
    import asyncio

    class Model:
        def predict(self, batch: list, requests: list[Request]) -> list:
            return [(x, r) for x, r in zip(batch, requests, strict=True)]

    instance = NativeModel(
        inspect_class(Model),
        config({"batch_size": 4}),
        model_dir=Path("/srv/m"),
        secrets={},
        executor=executor,
    )
    requests = [object(), object()]
    got = asyncio.run(instance.predict([1, 2], requests))
    assert got == [(1, requests[0]), (2, requests[1])]


def test_a_batch_beside_embeddings_calls_gives_predict_its_own_requests(
    executor: ThreadPoolExecutor,
) -> None:
    # a batch that mixes OpenAI embeddings calls (no request: None in their places) with
    # predict calls: embed takes the former, predict the others, with their requests in order
    import asyncio

    from podium.types import EmbedInputs

    class Model:
        def embed(self, texts: list[str]) -> Any:
            return [[1.0] for _ in texts]

        def predict(self, batch: list, requests: list[Request]) -> list:
            return [(x, r) for x, r in zip(batch, requests, strict=True)]

    instance = NativeModel(
        inspect_class(Model),
        config({"batch_size": 4}),
        model_dir=Path("/srv/m"),
        secrets={},
        executor=executor,
    )
    asyncio.run(instance.load())
    first, second = object(), object()
    batch = [EmbedInputs(["a"]), 1, EmbedInputs(["b"]), 2]
    got = asyncio.run(instance.predict(batch, [None, first, None, second]))
    assert got[1::2] == [(1, first), (2, second)]
    assert [list(map(list, v)) for v in got[::2]] == [[[1.0]], [[1.0]]]


# -- refused ------------------------------------------------------------------------------------


@pytest.mark.parametrize("raw", UNBATCHED)
@pytest.mark.parametrize("inputs", [True, False], ids=["inputs-and-requests", "requests-only"])
def test_a_list_of_requests_on_an_unbatched_predict_is_refused(
    inputs: bool, raw: dict[str, Any], executor: ThreadPoolExecutor
) -> None:
    spec = inspect_class(with_predict(list[Request], inputs=inputs))
    with pytest.raises(DefinitionError) as caught:
        check_config(spec, config(raw))
    (problem,) = caught.value.problems
    assert problem == (
        "Model.predict: its request parameter 'requests' is annotated as a list of requests, "
        "which only a batched predict gets; model 'm' does not batch predict, so it gets one "
        "request: annotate it starlette.requests.Request (or set batch_size above 1 to batch it)"
    )
    with pytest.raises(DefinitionError, match="'requests' is annotated as a list of requests"):
        NativeModel(spec, config(raw), model_dir=Path("/srv/m"), secrets={}, executor=executor)


@pytest.mark.parametrize("method", ["preprocess", "postprocess"])
@pytest.mark.parametrize("annotation", LISTS)
def test_a_list_of_requests_on_a_per_request_method_is_refused(
    method: str, annotation: Any
) -> None:
    spec = inspect_class(with_predict(annotation, name=method))
    with pytest.raises(DefinitionError) as caught:
        check_config(spec, config({"batch_size": 4}))  # predict is batched; method is not
    (problem,) = caught.value.problems
    assert problem == (
        f"Model.{method}: its request parameter 'requests' is annotated as a list of requests, "
        f"which only a batched predict gets; {method} runs once per request, so it gets one "
        "request: annotate it starlette.requests.Request"
    )


def test_a_list_of_requests_under_continuous_batching_is_refused() -> None:
    # step gets the batch; predict is not batched there
    class Model:
        def step(self, batch: list) -> None:
            pass

        def predict(self, inputs: Any, requests: list[Request]) -> Any:
            return inputs

    spec = inspect_class(Model)
    with pytest.raises(DefinitionError, match="'requests' is annotated as a list of requests"):
        check_config(spec, config({"batch_size": 4, "continuous_batching": True}))


@pytest.mark.parametrize("annotation", NOT_REQUESTS)
def test_other_annotations_of_the_second_parameter_stay_refused(annotation: Any) -> None:
    with pytest.raises(DefinitionError, match="'requests' must be the request"):
        inspect_class(with_predict(annotation))


def test_the_list_of_requests_still_comes_second() -> None:
    class Model:
        def predict(self, requests: list[Request], batch: Any) -> Any:
            return batch

    with pytest.raises(DefinitionError, match="'requests' must come second"):
        inspect_class(Model)


def test_the_refusal_names_where_a_second_parameter_may_be_a_list() -> None:
    with pytest.raises(DefinitionError, match=r"a batched predict's list of them as list\[Request"):
        inspect_class(with_predict(dict))


# -- a truss (batched by its podium.yaml) -------------------------------------------------------

TRUSS_HEAD = "import typing\nfrom starlette.requests import Request\n\n\nclass Model:\n"


def prepare_truss(root: Path, methods: str, podium: str) -> Any:
    (root / "model").mkdir(parents=True)
    (root / "config.yaml").write_text("model_name: t\n")
    (root / "podium.yaml").write_text(podium)
    (root / "model" / "model.py").write_text(TRUSS_HEAD + methods)
    (source,) = discover(root)
    return truss.prepare(source)


PREDICT = """
    def predict(self, batch, requests: {}):
        return batch
"""


@pytest.mark.parametrize(
    "annotation",
    [
        "list[Request]",
        "typing.List[Request]",
        "typing.Sequence[Request]",
        "typing.Optional[list[Request]]",
    ],
)
def test_a_batched_truss_predict_takes_the_list_of_requests(
    tmp_path: Path, annotation: str
) -> None:
    spec = prepare_truss(tmp_path / "t", PREDICT.format(annotation), "batch_size: 4\n")
    assert spec.predict.takes_request and spec.predict.request_list == "requests"
    only = "\n    def predict(self, requests: list[Request]):\n        return requests\n"
    spec = prepare_truss(tmp_path / "only", only, "batch_size: 4\n")
    assert spec.predict.takes_request and not spec.predict.takes_inputs


def test_an_unbatched_truss_predict_with_a_list_of_requests_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DefinitionError) as caught:
        prepare_truss(tmp_path / "t", PREDICT.format("list[Request]"), "max_queue_size: 7\n")
    (problem,) = caught.value.problems
    assert problem.endswith(
        "Model.predict: its request parameter 'requests' is annotated as a list of requests, "
        "which only a batched predict gets; model 't' does not batch predict, so it gets one "
        "request: annotate it starlette.requests.Request (or set batch_size above 1 to batch it)"
    )


@pytest.mark.parametrize("method", ["preprocess", "postprocess", "chat_completions"])
def test_a_truss_method_run_per_request_refuses_a_list_of_requests(
    tmp_path: Path, method: str
) -> None:
    methods = PREDICT.format("Request") + PREDICT.format("list[Request]").replace("predict", method)
    with pytest.raises(DefinitionError) as caught:
        prepare_truss(tmp_path / "t", methods, "batch_size: 4\n")
    (problem,) = caught.value.problems
    assert f"Model.{method}: its request parameter 'requests' is annotated" in problem
    assert f"{method} runs once per request" in problem


def test_a_plain_request_on_a_batched_truss_as_before(tmp_path: Path) -> None:
    spec = prepare_truss(tmp_path / "t", PREDICT.format("Request"), "batch_size: 4\n")
    assert spec.predict.takes_request and spec.predict.request_list is None
