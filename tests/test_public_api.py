"""The public surface: what users import from ``podium``, and what each package exports to the
others (the layering rules are in test_layers.py)."""

from __future__ import annotations

import importlib

import pytest
from import_graph import SRC, imports_of, is_module, module_name

import podium


def test_exported_names() -> None:
    assert sorted(podium.__all__) == podium.__all__
    assert set(podium.__all__) == {
        "Context",
        "Generation",
        "InferenceRequest",
        "InferenceResponse",
        "InvalidInput",
        "ModelError",
        "NotFound",
        "PodiumError",
        "RequestInput",
        "RequestOutput",
        "ResponseOutput",
        "Unavailable",
        "__version__",
        "device",
        "request_id",
    }
    for name in podium.__all__:
        assert hasattr(podium, name), name


def _all_order(name: str) -> tuple[int, str]:
    """isort's order for ``__all__`` (ruff's RUF022): CONSTANTS, then Classes, then the rest."""
    if name.isupper() and len(name) > 1:
        return (0, name)
    return (1 if name[:1].isupper() else 2, name)


def _packages() -> list[str]:
    return sorted(module_name(p) for p in SRC.rglob("__init__.py"))


#: Packages that mirror another project's import paths (TorchServe's ``ts.*``, MLServer's
#: ``mlserver.*``) keep that project's layout: an ``__all__`` there is optional.
MIRRORS = ("podium.compat.ts.", "podium.compat.mlserver.")


@pytest.mark.parametrize("package", _packages())
def test_every_package_exports_a_sorted_all(package: str) -> None:
    """Each package's ``__init__`` says what other packages may use: a sorted ``__all__`` of
    names it has (httpx's rule)."""
    module = importlib.import_module(package)
    exported = getattr(module, "__all__", None)
    if exported is None:
        assert package.startswith(MIRRORS), f"{package} has no __all__"
        return
    assert sorted(exported, key=_all_order) == list(exported), f"{package}.__all__ is not sorted"
    assert len(set(exported)) == len(exported), f"{package}.__all__ names a name twice"
    for name in exported:
        assert hasattr(module, name), f"{package}.__all__ names {name}, which it does not have"


def test_what_other_packages_import_from_a_package_is_in_its_all() -> None:
    """A name that a module imports from a package it is not inside (``from ..runtime import
    ModelVersion``) is one the package exports: packages import each other's ``__init__``."""
    missing = []
    for path in sorted(SRC.rglob("*.py")):
        for imp in imports_of(path):
            package, _, name = imp.target.rpartition(".")
            if is_module(imp.target) or not (SRC.parent / package.replace(".", "/")).is_dir():
                continue  # a module, or a name from a module (not from a package's __init__)
            if imp.importer == package or imp.importer.startswith(package + "."):
                continue  # a package's own modules may use what it has not exported
            if name not in importlib.import_module(package).__all__:
                missing.append(str(imp))
    assert not missing, "\n".join(missing)
