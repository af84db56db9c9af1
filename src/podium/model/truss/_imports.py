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

from ...errors import DefinitionError
from .._modules import exec_file, folders_first
from ._config import TrussSettings

__all__ = ["import_class"]


def import_class(settings: TrussSettings, label: str) -> type:
    """The truss's model class, its file imported with this truss's folders first; errors
    name the truss, the file and what went wrong."""
    file = settings.model_file
    if not file.is_file():
        raise DefinitionError(f"{label}: the model class file {file} does not exist")
    # its folders stay on sys.path afterwards, last, as Truss leaves them (for later imports)
    paths = [settings.root, *(p for p in settings.package_dirs if p.is_dir())]
    with folders_first(settings.root, paths, stay=True):
        module = exec_file(file, "podium_truss", label)
    cls = getattr(module, settings.class_name, None)
    if cls is None:
        raise DefinitionError(
            f"{label}: {file.name} defines no class '{settings.class_name}' "
            "(the config's model_class_name)"
        )
    if not isinstance(cls, type):
        raise DefinitionError(f"{label}: '{settings.class_name}' is not a class")
    return cls
