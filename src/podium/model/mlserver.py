"""Models written for MLServer: runtimes found through model-settings.json."""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

from ..errors import DefinitionError
from ..types import ModelInstance
from ._source import ModelSource

__all__ = ["build", "is_source", "prepare", "sources"]


def is_source(path: Path) -> bool:
    """Whether ``path`` holds a model written for MLServer (cheap: looks at names only)."""
    return False


def sources(path: Path) -> list[ModelSource]:
    """The model versions at ``path``; ``DefinitionError`` listing every problem."""
    raise DefinitionError(f"{path}: MLServer models are not supported yet")


def prepare(source: ModelSource) -> Any:
    """Import and check the model's code without instantiating it (``podium check`` stops here)."""
    raise DefinitionError(f"{source.label}: MLServer models are not supported yet")


def build(
    source: ModelSource, prepared: Any, *, secrets: Mapping[str, str], executor: Executor
) -> ModelInstance:
    """Instantiate the prepared model as a :class:`podium.types.ModelInstance`."""
    raise DefinitionError(f"{source.label}: MLServer models are not supported yet")
