"""Running a user's Python file as a module of its own, and importing a model's modules from
its own folders."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

from ..errors import DefinitionError

__all__ = ["exec_file", "folders_first"]

_lock = threading.RLock()
# Top-level module names imported from a model's folders, and which model: another model's
# module of the same name (every truss has a ``model`` package, every MLServer example a
# ``models.py``) must be imported afresh.
_imported_from: dict[str, Path] = {}


def _top_names(paths: list[Path]) -> set[str]:
    names: set[str] = set()
    for folder in paths:
        for entry in folder.iterdir():
            if entry.name.startswith((".", "_")):
                continue
            if entry.is_dir() or entry.suffix == ".py":
                names.add(entry.stem if entry.is_file() else entry.name)
    return names


def _under(file: Path, paths: list[Path]) -> bool:
    try:
        resolved = file.resolve()
    except OSError:
        return False
    return any(resolved.is_relative_to(p) for p in paths)


@contextmanager
def folders_first(owner: Path, paths: list[Path], *, stay: bool = False) -> Iterator[None]:
    """The folders of model ``owner`` first on ``sys.path`` (one model at a time) while its code
    is imported, and the top-level modules they hold its own: one of the same name that another
    model imported is imported afresh. ``stay``: they stay on ``sys.path`` afterwards, last (as
    Truss leaves them, for imports the model makes later)."""
    with _lock:
        for name in _top_names(paths):
            previous = _imported_from.get(name)
            if previous is not None and previous != owner:
                for loaded in [n for n in sys.modules if n == name or n.startswith(name + ".")]:
                    del sys.modules[loaded]
        texts = [str(p) for p in paths]
        if stay:  # moved to the front, not doubled
            sys.path[:] = [entry for entry in sys.path if entry not in texts]
        sys.path[:0] = texts
        importlib.invalidate_caches()
        try:
            yield
        finally:
            if stay:  # and then to the end
                sys.path[:] = [entry for entry in sys.path if entry not in texts] + texts
            else:
                for text in texts:
                    sys.path.remove(text)  # the first: the one put in front here
            for name, module in list(sys.modules.items()):
                file = getattr(module, "__file__", None)
                if file and "." not in name and _under(Path(file), paths):
                    _imported_from[name] = owner


def exec_file(file: Path, prefix: str, label: str) -> ModuleType:
    """``file`` imported as a module named ``prefix`` and a digest of its path (one name per
    file; registered in ``sys.modules``, and taken out again when running it raises, which
    propagates); ``DefinitionError`` naming ``label`` when it cannot be imported at all."""
    module_name = f"{prefix}_{hashlib.sha1(str(file).encode()).hexdigest()[:12]}"
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
