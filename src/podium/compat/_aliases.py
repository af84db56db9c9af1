"""Another server's import paths (``ts``, ``mlserver``) pointed at Podium's package for them.

:class:`Aliases` makes ``import ts.context`` (``mlserver.codecs.string``, ...) give the module
``podium.compat.ts.context`` itself: one object under both names, so every import path gives the
same classes. Each module is imported when its path first is, so one that needs an optional
library (``ts.torch_handler.base_handler``: torch) costs nothing until a model imports it. A path
Podium does not provide (``mlserver.batching``) is a plain ``ModuleNotFoundError`` naming it.
The finder is in place only while the real package is not installed.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

__all__ = ["Aliases"]


class Aliases(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``alias`` and its submodules as ``package``'s (see the module docstring)."""

    def __init__(self, alias: str, package: str) -> None:
        self.alias = alias
        self.package = package
        self._specs: dict[str, ModuleSpec | None] = {}

    def install(self) -> bool:
        """Point the import paths here, unless the package is installed; ``True`` if they are
        (now) in place. Idempotent."""
        if self in sys.meta_path:
            return True
        try:
            if importlib.util.find_spec(self.alias) is not None:
                return False  # the package itself (already imported, or importable)
        except (ImportError, ValueError):
            pass
        sys.meta_path.insert(0, self)
        return True

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != self.alias and not fullname.startswith(self.alias + "."):
            return None
        if importlib.util.find_spec(self.package + fullname[len(self.alias) :]) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.package + spec.name[len(self.alias) :])
        self._specs[module.__name__] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system gave the module the alias's spec; it keeps its own.
        module.__spec__ = self._specs.pop(module.__name__)
