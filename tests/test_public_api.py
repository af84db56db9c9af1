"""The public surface: what users import from ``podium``, and the layering rule."""

from __future__ import annotations

import ast
from pathlib import Path

import podium

SRC = Path(podium.__file__).resolve().parent


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
    }
    for name in podium.__all__:
        assert hasattr(podium, name), name


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def test_runtime_and_model_import_no_web_or_grpc_library() -> None:
    forbidden = {"starlette", "uvicorn", "granian", "fastapi", "grpc", "google", "httptools"}
    for layer in ("runtime", "model"):
        for path in (SRC / layer).rglob("*.py"):
            bad = _imports(path) & forbidden
            assert not bad, f"{path.relative_to(SRC)} imports {sorted(bad)}"


def test_lower_layers_do_not_import_front_ends() -> None:
    lower = [p for layer in ("runtime", "model", "dataplane") for p in (SRC / layer).rglob("*.py")]
    for path in lower:
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or not node.module:
                continue
            parts = node.module.split(".")
            target = parts[1:] if node.level == 0 and parts[0] == "podium" else parts
            if node.level or parts[0] == "podium":
                assert target[:1] not in (["server"], ["cli"]), (
                    f"{path.relative_to(SRC)} imports the front end module {node.module}"
                )
