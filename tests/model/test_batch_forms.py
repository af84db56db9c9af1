"""A batched ``predict`` annotated ``list[X]`` gets each request's inputs as ``X`` asks (a
native model's, and a truss's: only a pydantic element counts there).

Without batching, ``list[X]`` keeps meaning "the inputs as they are" (a JSON list body, say):
those cases are here too, so that the batched rule cannot leak into them.
"""

from __future__ import annotations

import collections.abc
import typing
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pydantic
import pytest

from podium.config import ModelConfig
from podium.errors import DefinitionError, InvalidInput
from podium.model import discover, truss
from podium.model._forms import batched_predict, input_form
from podium.model.native import NativeModel, inspect_class
from podium.model.truss._model import TrussModel
from podium.types import InferenceRequest, InputKind


class Point(pydantic.BaseModel):
    x: int
    y: int


OIP, SCHEMA, DEFAULT = InputKind.OIP_REQUEST, InputKind.SCHEMA, InputKind.DEFAULT

#: (annotation, what a batched predict's requests become): each spelling of a list of X
BATCHED = [
    (list[InferenceRequest], (OIP, None)),
    (typing.List[InferenceRequest], (OIP, None)),  # noqa: UP006
    (Sequence[InferenceRequest], (OIP, None)),
    (typing.Sequence[InferenceRequest], (OIP, None)),  # noqa: UP006
    (list[Point], (SCHEMA, Point)),
    (typing.List[Point], (SCHEMA, Point)),  # noqa: UP006
    (collections.abc.Sequence[Point], (SCHEMA, Point)),
    # as today: decoded inputs
    (list, (DEFAULT, None)),
    (typing.List, (DEFAULT, None)),  # noqa: UP006
    (list[dict], (DEFAULT, None)),
    (list[Any], (DEFAULT, None)),
    (list[list[InferenceRequest]], (DEFAULT, None)),
    (dict[str, InferenceRequest], (DEFAULT, None)),
    (tuple[InferenceRequest, ...], (DEFAULT, None)),
    # optional forms are not unwrapped, as ``InferenceRequest | None`` is not
    (list[InferenceRequest] | None, (DEFAULT, None)),
    (InferenceRequest | None, (DEFAULT, None)),
    # the plain forms, as before batching named its list
    (InferenceRequest, (OIP, None)),
    (Point, (SCHEMA, Point)),
    (None, (DEFAULT, None)),
]


@pytest.mark.parametrize(("annotation", "form"), BATCHED)
def test_batched_form_of_each_annotation(annotation: Any, form: tuple) -> None:
    assert input_form(annotation, batched=True) == form


@pytest.mark.parametrize("annotation", [a for a, _ in BATCHED if typing.get_args(a)])
def test_without_batching_a_list_annotation_is_the_inputs_as_they_are(annotation: Any) -> None:
    assert input_form(annotation) == (DEFAULT, None)


@pytest.mark.parametrize(
    ("raw", "batched"),
    [
        ({}, False),
        ({"batch_size": 1}, False),
        ({"batch_size": 4}, True),
        ({"batch_size": 4, "sequence_batching": True}, True),  # a worker's batch of sequences
        ({"batch_size": 4, "continuous_batching": True}, False),  # step gets the batch
    ],
)
def test_which_configs_batch_predict(raw: dict[str, Any], batched: bool) -> None:
    assert batched_predict(ModelConfig.from_mapping(raw, default_name="m", where="m")) is batched


# -- the spec and the instance ------------------------------------------------------------------


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(2, thread_name_prefix="test-model") as pool:
        yield pool


def build(cls: type, executor: ThreadPoolExecutor, **raw: Any) -> NativeModel:
    config = ModelConfig.from_mapping(raw, default_name="m", where="m")
    return NativeModel(
        inspect_class(cls), config, model_dir=Path("/srv/m"), secrets={}, executor=executor
    )


class BatchOfRequests:
    def predict(self, batch: list[InferenceRequest]) -> list[Any]:
        return list(batch)


class BatchOfPoints:
    def predict(self, batch: list[Point]) -> list[Any]:
        return list(batch)


def test_batched_list_of_requests_gets_requests(executor: ThreadPoolExecutor) -> None:
    caps = build(BatchOfRequests, executor, batch_size=4).capabilities
    assert (caps.input_kind, caps.input_schema) == (OIP, None)


def test_batched_list_of_models_validates_each(executor: ThreadPoolExecutor) -> None:
    model = build(BatchOfPoints, executor, batch_size=4)
    assert (model.capabilities.input_kind, model.capabilities.input_schema) == (SCHEMA, Point)
    assert model.validate({"x": 1, "y": 2}) == Point(x=1, y=2)


@pytest.mark.parametrize("cls", [BatchOfRequests, BatchOfPoints])
def test_unbatched_list_annotation_unchanged(cls: type, executor: ThreadPoolExecutor) -> None:
    spec = inspect_class(cls)
    assert (spec.input_kind, spec.input_schema) == (DEFAULT, None)
    if cls is BatchOfPoints:  # (a JSON list body, as it came)
        caps = build(cls, executor).capabilities
        assert (caps.input_kind, caps.input_schema) == (DEFAULT, None)


@pytest.mark.parametrize(
    "raw", [{}, {"batch_size": 1}, {"batch_size": 4, "continuous_batching": True}]
)
def test_a_list_of_requests_where_one_request_comes_is_refused_at_load(
    raw: dict[str, Any], executor: ThreadPoolExecutor
) -> None:
    # it would get one request's decoded inputs: refused with what to change, not a 500 later
    with pytest.raises(DefinitionError, match="BatchOfRequests.predict is annotated as a list"):
        build(BatchOfRequests, executor, **raw)

    class Preprocessed:
        def preprocess(self, request: Sequence[InferenceRequest]) -> Any:
            return request

        def predict(self, batch: list[Any]) -> list[Any]:
            return batch

    with pytest.raises(DefinitionError, match="set batch_size above 1"):
        build(Preprocessed, executor, batch_size=4)  # preprocess takes one request


def test_batched_preprocess_decides_per_request(executor: ThreadPoolExecutor) -> None:
    # preprocess runs once per request, before the batch forms: predict's list holds what it
    # returned, so predict's annotation converts nothing.
    class Model:
        def preprocess(self, inputs: dict) -> Any:
            return inputs

        def predict(self, batch: list[Point]) -> list[Any]:
            return batch

    caps = build(Model, executor, batch_size=4).capabilities
    assert (caps.input_kind, caps.input_schema) == (DEFAULT, None)


def test_batched_plain_annotations_as_before(executor: ThreadPoolExecutor) -> None:
    class Requests:
        def predict(self, batch: InferenceRequest) -> list[Any]:
            return [batch]

    class Points:
        def predict(self, batch: Point) -> list[Any]:
            return [batch]

    assert build(Requests, executor, batch_size=4).capabilities.input_kind is OIP
    assert build(Points, executor, batch_size=4).capabilities.input_schema is Point


# -- a truss's model (batched by its podium.yaml) -----------------------------------------------

TRUSS_MODEL = """
from pydantic import BaseModel


class Item(BaseModel):
    name: str


class Model:
    def predict(self, items: list[Item]) -> list:
        return items
"""


def truss_model(root: Path, executor: ThreadPoolExecutor, podium: str) -> TrussModel:
    (root / "model").mkdir(parents=True)
    (root / "config.yaml").write_text("{}\n")
    (root / "podium.yaml").write_text(podium)
    (root / "model" / "model.py").write_text(TRUSS_MODEL)
    (source,) = discover(root)
    instance = truss.build(source, truss.prepare(source), secrets={}, executor=executor)
    assert isinstance(instance, TrussModel)
    return instance


def test_batched_truss_list_of_models_validates_each(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    model = truss_model(tmp_path / "t", executor, "batch_size: 4\n")
    assert model.capabilities.input_kind is SCHEMA
    assert type(model.validate({"name": "a"})).__name__ == "Item"
    with pytest.raises(InvalidInput, match="name"):
        model.validate({"other": 1})


def test_unbatched_truss_list_annotation_unchanged(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    model = truss_model(tmp_path / "t", executor, "max_queue_size: 7\n")
    assert (model.capabilities.input_kind, model.capabilities.input_schema) == (DEFAULT, None)
