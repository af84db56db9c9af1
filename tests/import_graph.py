"""The imports of Podium's own modules, read with ``ast`` (for test_layers and test_public_api)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import podium

SRC = Path(podium.__file__).resolve().parent


@dataclass(frozen=True)
class Import:
    importer: str  # the importing module, dotted
    target: str  # the module imported, or module.name for a name imported from one
    line: int

    def __str__(self) -> str:
        return f"{self.importer} (line {self.line}) imports {self.target}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_module(dotted: str) -> bool:
    """Whether ``dotted`` names a module or package under src/podium."""
    path = SRC.parent.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imports_of(path: Path, source: str | None = None) -> Iterator[Import]:
    """Every import of ``podium`` in the module at ``path`` (``source``: its text, if given)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text() if source is None else source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "podium":
                    yield Import(name, alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            if module.split(".")[0] != "podium":
                continue
            for alias in node.names:
                yield Import(name, f"{module}.{alias.name}", node.lineno)
