"""tests/models/openai/vectors in worker processes (config.yaml: workers: process)."""

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "podium_test_openai_vectors", Path(__file__).parents[2] / "openai" / "vectors" / "model.py"
)
assert _spec is not None and _spec.loader is not None
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)
Model = _module.Model
