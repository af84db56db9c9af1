"""Finding models on disk and importing their code.

A path given to ``podium serve`` is one of:

- a ``.py`` file holding the model class (named after the file);
- a model directory: ``model.py`` and an optional ``config.yaml`` (named after the directory);
- a versioned model directory: ``config.yaml`` (optional, shared) and numbered subdirectories
  ``1/``, ``2/``, ... each holding ``model.py`` and an optional ``config.yaml`` of its own;
- a model written for MLServer: a directory with ``model-settings.json`` (``model/mlserver/``);
- a model written for TorchServe: a ``.mar`` / ``.tar.gz`` archive or a directory holding
  ``MAR-INF/MANIFEST.json`` (``model/torchserve/``);
- a truss: ``config.yaml`` and ``model/model.py`` (``model/truss/``);
- a model repository: a directory whose subdirectories are any of the above.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..config import ModelConfig, load_yaml
from ..errors import DefinitionError
from . import mlserver, torchserve, truss
from ._calls import defining
from ._modules import exec_file
from ._source import ModelSource
from .native import ModelSpec, inspect_class

__all__ = [
    "discover",
    "discover_all",
    "import_model",
    "model_paths",
]


def _is_version_dir(path: Path) -> bool:
    return (
        path.is_dir()
        and path.name.isdigit()
        and path.name.isascii()
        and (path / "model.py").is_file()
    )


def _config_of(directory: Path) -> tuple[dict[str, Any], Path]:
    path = directory / "config.yaml"
    if not path.exists():
        path = directory / "config.yml"
    return (load_yaml(path) if path.exists() else {}), path


def discover(path: Path) -> list[ModelSource]:
    """The models under ``path``; raise ``DefinitionError`` listing every problem found."""
    found, problems = discover_all(path)
    DefinitionError.check(problems)
    return found


def discover_all(path: Path) -> tuple[list[ModelSource], list[str]]:
    """The models under ``path`` that are well configured, and the problems with the others."""
    problems: list[str] = []
    found: list[ModelSource] = []
    _discover(path, found, problems, top=True)
    return found, problems


#: The adapters of models written for another server, each recognising its own by a look at
#: the path (``is_source``), in the order they are asked.
_ADAPTERS = (mlserver, torchserve, truss)


def _adapter_of(path: Path) -> Any:
    return next((adapter for adapter in _ADAPTERS if adapter.is_source(path)), None)


def _is_model(path: Path) -> bool:
    """Whether ``path`` is one model (its versions), not a repository: a file, a model written
    for MLServer or TorchServe, a truss, a model directory or a versioned one."""
    if not path.is_dir() or _adapter_of(path) is not None or (path / "model.py").is_file():
        return True
    return any(_is_version_dir(p) for p in path.iterdir())


def model_paths(path: Path) -> list[Path]:
    """The path of each model that ``path`` holds, as :func:`discover` finds them: ``path``
    itself when it is one model (a file, a model directory, a versioned model directory, an
    archive, ...), else each entry of the repository that is one. Discovering one of them finds
    that model's versions and nothing else (podium.ray gives each replica the path of its own
    model, so that it imports no other model's code and extracts no other archive)."""
    if not path.exists() or _is_model(path):
        return [path]
    return [p for p in _entries(path) if _is_model(p)]


def _entries(repository: Path) -> list[Path]:
    """What a model repository may hold, in order: its directories and TorchServe archives (a
    TorchServe model store holds .mar files), less hidden and private ones."""
    return sorted(
        p
        for p in repository.iterdir()
        if not p.name.startswith((".", "_")) and (p.is_dir() or torchserve.is_source(p))
    )


def _discover(path: Path, found: list[ModelSource], problems: list[str], *, top: bool) -> None:
    try:
        if not path.exists():
            problems.append(f"{path}: no such file or directory")
        elif (adapter := _adapter_of(path)) is not None:  # a TorchServe archive is a file
            found.extend(adapter.sources(path))
        elif path.is_file():
            if path.suffix != ".py":
                problems.append(f"{path}: a model file must be a .py file")
            else:
                found.append(_source(path, path.parent, {}, path.stem, path))
        elif (path / "model.py").is_file():
            data, cfg = _config_of(path)
            found.append(_source(path / "model.py", path, data, path.name, cfg))
        elif any(_is_version_dir(p) for p in path.iterdir()):
            shared, cfg = _config_of(path)
            # checked on its own first, so that its problems name its own file, once
            ModelConfig.from_mapping(shared, default_name=path.name, where=str(cfg))
            for sub in sorted(p for p in path.iterdir() if _is_version_dir(p)):
                own, own_cfg = _config_of(sub)
                data = {**shared, **own, "version": own.get("version", sub.name)}
                found.append(_source(sub / "model.py", sub, data, path.name, own_cfg))
        elif top:
            before = len(found) + len(problems)
            for sub in _entries(path):
                _discover(sub, found, problems, top=False)
            if len(found) + len(problems) == before:
                problems.append(f"{path}: holds no model (no model.py, no model subdirectories)")
        else:
            pass  # a stray directory inside a repository is not a model
    except DefinitionError as exc:
        problems.extend(exc.problems)


def _source(
    file: Path, model_dir: Path, data: dict[str, Any], default_name: str, cfg: Path
) -> ModelSource:
    config = ModelConfig.from_mapping(data, default_name=default_name, where=str(cfg))
    return ModelSource(config, file.resolve(), model_dir.resolve())


#: What to do with a bare TorchServe handler given as a model file (it imports ``ts``, which
#: Podium provides to TorchServe models only, or it defines ``handle``).
_HANDLER_HINT = (
    ". This looks like a TorchServe handler: Podium serves one as TorchServe does, from an "
    "archive or a directory holding MAR-INF/MANIFEST.json. Make one with 'podium archive "
    "--model-name NAME --handler {file} --archive-format no-archive --export-path DIR' "
    "(add --config-file model-config.yaml and --extra-files as torch-model-archiver takes "
    "them), then check or serve DIR/NAME"
)


def _torchserve_hint(exc: Exception, file: Path) -> str:
    missing = getattr(exc, "name", None) if isinstance(exc, ModuleNotFoundError) else None
    if missing is None or missing.split(".")[0] != "ts":
        return ""
    return _HANDLER_HINT.format(file=file.name)


def import_model(source: ModelSource) -> ModelSpec:
    """Import the model's file and check its class; errors name the model, the file and the rule."""
    file = source.file
    with defining(f"{source.label}: importing the file", lambda exc: _torchserve_hint(exc, file)):
        module = exec_file(file, "podium_user_model", source.label)
    class_name = source.config.model_class_name
    cls = getattr(module, class_name, None)
    if cls is None:
        handles = callable(getattr(module, "handle", None)) or any(
            isinstance(v, type) and v.__module__ == module.__name__ and hasattr(v, "handle")
            for v in vars(module).values()
        )
        hint = _HANDLER_HINT.format(file=file.name) if handles else ""
        raise DefinitionError(f"{source.label}: the file defines no class '{class_name}'{hint}")
    try:
        return inspect_class(cls)
    except DefinitionError as exc:
        problems = [f"{source.label}: {p}" for p in exc.problems]
        raise DefinitionError.of(problems) from None
