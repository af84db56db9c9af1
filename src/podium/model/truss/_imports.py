"""Importing a truss's model class as Truss's server does.

Truss's image puts the truss's folder on ``sys.path`` (its server runs from it), so siblings of
``model/model.py`` import as ``model.helpers`` / ``from model import helpers``, and appends the
bundled packages folder (``packages/``, where ``external_package_dirs`` are copied too). The
model file itself is loaded from its path. Podium does the same for each truss, with two
differences that several trusses in one server need: a truss's folders go first on
``sys.path`` while its file is imported, and a top-level module another truss imported under the
same name (every truss has a ``model`` package) is imported afresh from this truss.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ...errors import DefinitionError
from .._modules import exec_file
from ._config import TrussSettings

__all__ = ["import_class", "paths_first"]

_lock = threading.RLock()
# Top-level module names imported from a truss's folders, and which truss: another truss's
# module of the same name must be imported afresh.
_imported_from: dict[str, Path] = {}


def _search_paths(settings: TrussSettings) -> list[Path]:
    return [settings.root, *(p for p in settings.package_dirs if p.is_dir())]


def _top_names(paths: list[Path]) -> set[str]:
    names: set[str] = set()
    for folder in paths:
        for entry in folder.iterdir():
            if entry.name.startswith((".", "_")):
                continue
            if entry.is_dir() or entry.suffix == ".py":
                names.add(entry.stem if entry.is_file() else entry.name)
    return names


@contextmanager
def paths_first(settings: TrussSettings) -> Iterator[None]:
    """This truss's folders first on ``sys.path`` (they stay on it afterwards, last, as Truss
    leaves them, for imports the model makes later), and the modules they hold its own."""
    paths = _search_paths(settings)
    with _lock:
        for name in _top_names(paths):
            owner = _imported_from.get(name)
            if owner is not None and owner != settings.root:
                for loaded in [n for n in sys.modules if n == name or n.startswith(name + ".")]:
                    del sys.modules[loaded]
        texts = [str(p) for p in paths]
        for text in texts:
            while text in sys.path:
                sys.path.remove(text)
        sys.path[:0] = texts
        importlib.invalidate_caches()
        try:
            yield
        finally:
            for text in texts:
                while text in sys.path:
                    sys.path.remove(text)
            sys.path.extend(texts)
            for name, module in list(sys.modules.items()):
                file = getattr(module, "__file__", None)
                if file and "." not in name and _under(Path(file), paths):
                    _imported_from[name] = settings.root


def _under(file: Path, paths: list[Path]) -> bool:
    try:
        resolved = file.resolve()
    except OSError:
        return False
    return any(resolved.is_relative_to(p) for p in paths)


def import_class(settings: TrussSettings, label: str) -> type:
    """The truss's model class, its file imported with this truss's folders first; errors
    name the truss, the file and what went wrong."""
    file = settings.model_file
    if not file.is_file():
        raise DefinitionError(f"{label}: the model class file {file} does not exist")
    digest = hashlib.sha1(str(file).encode()).hexdigest()[:12]
    module_name = f"podium_truss_{digest}"
    with paths_first(settings):
        module = exec_file(file, module_name, label)
    cls = getattr(module, settings.class_name, None)
    if cls is None:
        raise DefinitionError(
            f"{label}: {file.name} defines no class '{settings.class_name}' "
            "(the config's model_class_name)"
        )
    if not isinstance(cls, type):
        raise DefinitionError(f"{label}: '{settings.class_name}' is not a class")
    return cls
