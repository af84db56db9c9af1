"""Writes tests/mlserver-1.7.1-public-names.json: MLServer 1.7.1's public names, per module.

    python tests/mlserver_public_names.py GIT_DIR [TAG] > tests/mlserver-1.7.1-public-names.json

GIT_DIR is a clone of SeldonIO/MLServer (a bare one will do). Nothing is imported: each module
of the ``mlserver`` package at TAG is parsed. A module's public names are its ``__all__``
where it has one; else what it defines at top level (functions, classes, assignments) whose
name does not start with ``_``, and, in a package's ``__init__``, what it imports from its own
submodules. Modules whose path has a part starting with ``_`` and generated ``*_pb2*`` modules
are left out; ``mlserver.version`` is given its ``__version__``.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys


def git(git_dir: str, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", git_dir, *args], check=True, capture_output=True, text=True
    ).stdout


def public_names(source: str, is_package: bool) -> list[str]:
    declared = None
    defined: set[str] = set()
    for node in ast.parse(source).body:
        names: list[str] = []
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names = [node.name]
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names.append(target.id)
                    if target.id == "__all__":
                        declared = ast.literal_eval(node.value)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names = [node.target.id]
        elif isinstance(node, ast.ImportFrom) and node.level > 0 and is_package:
            names = [alias.asname or alias.name for alias in node.names]
        defined.update(n for n in names if not n.startswith("_") or n == "__version__")
    return sorted(declared if declared is not None else defined)


def main(git_dir: str, tag: str = "1.7.1") -> None:
    modules: dict[str, list[str]] = {}
    for path in git(git_dir, "ls-tree", "-r", "--name-only", tag, "mlserver").split():
        if not path.endswith(".py") or "_pb2" in path:
            continue
        name = path[: -len(".py")].replace("/", ".").removesuffix(".__init__")
        if any(part.startswith("_") for part in name.split(".")):
            continue
        source = git(git_dir, "show", f"{tag}:{path}")
        modules[name] = public_names(source, path.endswith("__init__.py"))
    json.dump({"tag": tag, "modules": modules}, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
