"""Running a user's Python file as a module of its own."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from ..errors import DefinitionError

__all__ = ["exec_file"]


def exec_file(file: Path, module_name: str, label: str) -> ModuleType:
    """``file`` imported as ``module_name`` (registered in ``sys.modules``, and taken out again
    when running it raises, which propagates); ``DefinitionError`` naming ``label`` when it
    cannot be imported at all."""
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise DefinitionError(f"{label}: cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module
