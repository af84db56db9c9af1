"""The MLServer adapter: runtimes found through ``model-settings.json``.

A directory holding ``model-settings.json`` is one model version (``name`` defaults to the
directory's name, ``parameters.version`` is the version); a directory whose every subdirectory
holds one is several (MLServer's ``model/1/model-settings.json`` layout). How each key maps onto
Podium is in ``_settings`` and ``docs/mlserver.md``.

Nothing here imports pydantic or ``podium.compat.mlserver`` until a model is prepared: discovery
stays cheap and native models never pay for them.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from ...errors import DefinitionError
from ...types import ModelInstance
from .._calls import defining
from .._modules import folders_first
from .._source import ModelSource
from ._settings import SETTINGS_FILE, read_settings, runtime_settings

__all__ = ["build", "is_source", "prepare", "sources"]


def _candidates(path: Path) -> list[Path]:
    return sorted(
        p
        for p in path.iterdir()
        if p.is_dir() and not p.name.startswith((".", "_")) and (p / SETTINGS_FILE).is_file()
    )


def is_source(path: Path) -> bool:
    """Whether ``path`` holds a model written for MLServer: ``model-settings.json`` in it, or in
    every one of its subdirectories (and at least one) while it holds no ``model.py``."""
    if not path.is_dir():
        return False
    if (path / SETTINGS_FILE).is_file():
        return True
    if (path / "model.py").exists():
        return False
    subdirs = [p for p in path.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))]
    return bool(subdirs) and all((p / SETTINGS_FILE).is_file() for p in subdirs)


def sources(path: Path) -> list[ModelSource]:
    """The model versions at ``path``; ``DefinitionError`` listing every problem."""
    folders = [path] if (path / SETTINGS_FILE).is_file() else _candidates(path)
    found: list[ModelSource] = []
    problems: list[str] = []
    for folder in folders:
        try:
            found.append(read_settings(folder / SETTINGS_FILE))
        except DefinitionError as exc:
            problems.extend(exc.problems)
    DefinitionError.check(problems)
    return found


@dataclass(frozen=True, slots=True)
class Prepared:
    """A runtime class, imported and checked, and the flavour of ``mlserver`` it is written to."""

    cls: type
    types: ModuleType  # mlserver.types: MLServer's own, or podium.compat.mlserver.types
    settings: ModuleType  # mlserver.settings, of the same flavour
    streaming: bool


def _base_flavour(cls: type) -> str:
    """'mlserver' when the class derives from MLServer's own MLModel, else 'compat'."""
    for base in cls.__mro__:
        if base.__name__ == "MLModel" and base.__module__.split(".")[0] == "mlserver":
            return "mlserver"
    return "compat"


def _overrides_predict_stream(cls: type) -> bool:
    for base in cls.__mro__:
        if "predict_stream" in vars(base):
            return not (base.__name__ == "MLModel" and base.__module__.endswith("mlserver.model"))
    return False


def _import_implementation(source: ModelSource) -> type:
    implementation = source.mlserver_parts().implementation
    module_name, _, attribute = implementation.rpartition(".")
    with folders_first(source.model_dir, [source.model_dir]):  # for a moment
        module = importlib.import_module(module_name)
    cls = getattr(module, attribute, None)
    if cls is None:
        raise DefinitionError(
            f"{source.label}: 'implementation' names '{implementation}', but module "
            f"'{module_name}' defines no '{attribute}'"
        )
    return cls


def prepare(source: ModelSource) -> Any:
    """Import and check the runtime class without instantiating it (``podium check`` stops here)."""
    from ...compat import mlserver as compat

    compat.install_import_paths()  # `from mlserver import MLModel` works without MLServer
    implementation = source.mlserver_parts().implementation
    with defining(f"{source.label}: importing 'implementation' ({implementation})"):
        cls = _import_implementation(source)
    if not inspect.isclass(cls):
        raise DefinitionError(f"{source.label}: 'implementation' must name a class, not {cls!r}")
    problems = [
        f"{source.label}: {cls.__name__} has no {method}() method"
        for method in ("load", "predict")
        if not callable(getattr(cls, method, None))
    ]
    DefinitionError.check(problems)
    if _base_flavour(cls) == "mlserver":
        types = importlib.import_module("mlserver.types")
        settings = importlib.import_module("mlserver.settings")
    else:
        types, settings = compat.types, compat.settings
    prepared = Prepared(cls, types, settings, _overrides_predict_stream(cls))
    runtime_settings(source, settings)  # the settings validate: inputs, outputs, parameters
    return prepared


def build(
    source: ModelSource, prepared: Any, *, secrets: Mapping[str, str], executor: Executor
) -> ModelInstance:
    """Instantiate the prepared runtime (``Class(settings)``, as MLServer does) as a
    :class:`podium.types.ModelInstance`."""
    from ._runtime import MLServerModel

    settings = runtime_settings(source, prepared.settings)
    with defining(f"{source.label}: {prepared.cls.__name__}(settings)"):
        runtime = prepared.cls(settings)
    return MLServerModel(
        runtime,
        name=source.config.name,
        types=prepared.types,
        streaming=prepared.streaming,
        batched=source.config.batch_size > 1,
        executor=executor,
    )
