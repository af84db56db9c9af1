"""What a model's first parameter asks for, read off its annotation (docs/protocols.md's table).

One request's inputs become the OIP request itself for ``InferenceRequest``, a validated object
for a pydantic model, and the decoded inputs for anything else. A batched ``predict`` gets a
list of those, one per request, and says so the way a type checker wants it: ``list[X]`` (or
``Sequence[X]``) asks for each element as ``X`` would. Without batching ``list[X]`` is "anything
else", as it always was: a JSON list body, say, passed as it came.
"""

from __future__ import annotations

import collections.abc
from typing import Any, get_args, get_origin

from ..config import ModelConfig
from ..types import InferenceRequest, InputKind

__all__ = [
    "batched_predict",
    "input_form",
    "is_schema_annotation",
    "mro_has",
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


def requests_batch(annotation: Any) -> bool:
    """Whether ``annotation`` names a batch of OIP requests (``list[InferenceRequest]`` and the
    other spellings of a batch): what only a batched ``predict`` can be given."""
    if get_origin(annotation) not in _BATCHES or len(get_args(annotation)) != 1:
        return False
    (element,) = get_args(annotation)
    return isinstance(element, type) and issubclass(element, InferenceRequest)
