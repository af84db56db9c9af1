"""examples/echo's model, served with the response cache its config.yaml turns on."""

import runpy
from pathlib import Path

_ECHO = Path(__file__).resolve().parents[3] / "examples" / "echo" / "model.py"
Model = runpy.run_path(str(_ECHO))["Model"]
