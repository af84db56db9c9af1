"""The ``mlserver`` import paths, pointed at this package when MLServer is not installed.

Every public module of ``podium.compat.mlserver`` is entered in ``sys.modules`` under its
``mlserver`` name (``mlserver.types`` is ``podium.compat.mlserver.types``, the same object), so
``import mlserver.codecs.string`` finds the module already imported instead of importing a copy.
A name Podium does not provide (``mlserver.batching``...) is then a plain ``ModuleNotFoundError``.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import sys
from types import ModuleType

__all__ = ["install_import_paths", "real_mlserver_installed", "uninstall_import_paths"]

_PACKAGE = __name__.rpartition(".")[0]  # podium.compat.mlserver


def _ours(module: ModuleType | None) -> bool:
    return module is not None and getattr(module, "__name__", "").startswith(_PACKAGE)


def real_mlserver_installed() -> bool:
    """Whether MLServer itself can be imported (our own aliases do not count)."""
    present = sys.modules.get("mlserver")
    if present is not None:
        return not _ours(present)
    try:
        return importlib.util.find_spec("mlserver") is not None
    except (ImportError, ValueError):
        return False


def _public_modules() -> dict[str, ModuleType]:
    package = importlib.import_module(_PACKAGE)
    found = {"mlserver": package}
    for info in pkgutil.walk_packages(package.__path__, _PACKAGE + "."):
        if any(part.startswith("_") for part in info.name.split(".")):
            continue
        found["mlserver" + info.name[len(_PACKAGE) :]] = importlib.import_module(info.name)
    return found


def install_import_paths() -> bool:
    """Make ``mlserver`` and its submodules import this package's modules, unless MLServer is
    installed; ``True`` if the aliases are (now) in place. Idempotent."""
    if real_mlserver_installed():
        return False
    for name, module in _public_modules().items():
        sys.modules.setdefault(name, module)
    return True


def uninstall_import_paths() -> None:
    """Remove the aliases (for tests); MLServer's own modules are left alone."""
    for name in [n for n in sys.modules if n == "mlserver" or n.startswith("mlserver.")]:
        if _ours(sys.modules[name]):
            del sys.modules[name]
