"""Trusses (Baseten's model packaging): a folder with ``config.yaml`` and ``model/model.py``,
served as Truss's own model server serves it (docs/truss.md).

Layout: ``_config`` reads ``config.yaml`` (Truss's keys and defaults, onto ``ModelConfig`` and
:class:`TrussSettings`); ``_imports`` imports the model class with the truss's folders on the
path; ``_spec`` checks the class by Truss's rules and makes its schema; ``_model`` is the
instance (:class:`TrussModel`); ``_secrets`` and ``_environ`` give its code the truss's secrets
and environment variables; ``_requirements`` says which of its requirements are not installed.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

from ...errors import DefinitionError
from ...types import ModelInstance
from .._calls import defining
from .._forms import one_request_lists
from .._source import ModelSource
from ._accelerator import accelerator_mismatch
from ._config import TrussSettings, is_source, read_truss
from ._environ import install, using
from ._imports import import_class
from ._requirements import missing_requirements
from ._spec import TrussSpec, inspect_truss

__all__ = [
    "TrussSettings",
    "accelerator_note",
    "build",
    "is_source",
    "missing_requirements",
    "notes",
    "prepare",
    "sources",
]


def sources(path: Path) -> list[ModelSource]:
    """The truss at ``path`` (one model version); ``DefinitionError`` listing every problem."""
    return [read_truss(path)]


def notes(source: ModelSource) -> list[str]:
    """What Podium does not do of this truss's config, and the requirements it names that this
    environment does not satisfy (``podium check`` prints them; ``serve`` logs them)."""
    settings = source.truss_parts().settings
    found = list(settings.notes)
    missing = missing_requirements(settings.requirements)
    if missing:
        found.append(
            f"{source.label}: requirements not installed here: {', '.join(missing)} "
            f"(pip install {' '.join(repr(m) if ' ' in m else m for m in missing)})"
        )
    return found


def accelerator_note(source: ModelSource, gpus: list[tuple[int, str]]) -> str | None:
    """A warning where the GPUs (``(number, name)``) the truss was given are not of the type
    its ``resources.accelerator`` names (``A10G:2``); None where they are, or it names none."""
    resources = source.config.raw.get("resources")
    accelerator = resources.get("accelerator") if isinstance(resources, Mapping) else None
    if not accelerator or not gpus:
        return None
    return accelerator_mismatch(source.label, str(accelerator), gpus)


def prepare(source: ModelSource) -> TrussSpec:
    """Import the truss's model class and check it by Truss's rules (nothing is instantiated).
    An import that fails names the truss's requirements that are not installed."""
    settings = source.truss_parts().settings
    if settings.environment:
        install()

    def hint(exc: Exception) -> str:
        missing = missing_requirements(settings.requirements)
        if not isinstance(exc, ImportError) or not missing:
            return ""
        return (
            f"; the truss's requirements not installed here: {', '.join(missing)} "
            f"(install them: pip install {' '.join(missing)})"
        )

    with defining(f"{source.label}: importing the file", hint), using(settings.environment):
        cls = import_class(settings, source.label)
    try:
        spec = inspect_truss(cls)
        methods = [spec.preprocess, spec.predict, spec.postprocess, *spec.endpoints.values()]
        DefinitionError.check(one_request_lists(cls, methods, source.config))
        return spec
    except DefinitionError as exc:
        problems = [f"{source.label}: {p}" for p in exc.problems]
        raise DefinitionError.of(problems) from None


def build(source: ModelSource, prepared: Any, *, secrets: Any, executor: Executor) -> ModelInstance:
    """One instance of a prepared truss (its ``__init__`` runs here)."""
    from ._model import TrussModel

    return TrussModel(prepared, source, secrets=secrets, executor=executor)
