"""What the KServe tests share: deploy/kserve/'s files, parsed; the deploy tools' venv
(``.venv-kserve``: KServe's SDK and hadolint, made by ``dev.py``) and a way to run
``kserve_sdk.py`` in it."""

from __future__ import annotations

import importlib.util
import json
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import ROOT

KSERVE = ROOT / "deploy" / "kserve"
DOCKERFILE = KSERVE / "Dockerfile"
RUNTIMES = KSERVE / "servingruntime.yaml"
SERVICES = KSERVE / "inferenceservice.yaml"
SDK_SCRIPT = Path(__file__).resolve().parent / "kserve_sdk.py"

#: KServe's storage path: where its storage initializer puts the model (storageUri).
KSERVE_MODEL_DIR = "/mnt/models"

#: What kserve_sdk.py's inferences send (the echo model answers each input as an output of the
#: same name).
SENT = {
    "x": {"datatype": "FP32", "shape": [2, 3], "data": [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]},
    "n": {"datatype": "INT64", "shape": [3], "data": [1, -2, 3]},
    "text": {"datatype": "BYTES", "shape": [2], "data": ["hello", "kserve"]},
}


def _dev() -> Any:
    spec = importlib.util.spec_from_file_location("podium_dev_py", ROOT / "dev.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def tools_python() -> Path:
    """The python of .venv-kserve; dev.py installs it (``dev.py test`` does, before pytest; a
    plain pytest run makes it here, once: about a minute)."""
    return Path(_dev().deploy_tools())


def run_sdk(python: Path, *args: str, timeout: float = 120) -> dict[str, Any]:
    """``kserve_sdk.py ARGS`` in the tools' venv; its JSON answer."""
    done = subprocess.run(
        [str(python), str(SDK_SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )
    if done.returncode != 0:
        pytest.fail(f"kserve_sdk.py {shlex.join(args)} exited {done.returncode}:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@dataclass(frozen=True)
class Instruction:
    """One Dockerfile instruction: its keyword, its arguments as written, and where."""

    keyword: str
    args: str
    line: int

    def exec_form(self) -> list[str]:
        """The JSON array of an exec-form ENTRYPOINT / CMD / HEALTHCHECK CMD (ValueError if it
        is written in shell form, which would put a shell between tini and Podium)."""
        text = self.args
        if self.keyword == "HEALTHCHECK":
            text = text[text.index(" CMD ") + len(" CMD ") :].strip()
        form = json.loads(text) if text.startswith("[") else None
        if not isinstance(form, list) or not all(isinstance(a, str) for a in form):
            raise ValueError(f"line {self.line}: {self.keyword} is not in exec form: {self.args}")
        return form


def dockerfile(path: Path = DOCKERFILE) -> list[Instruction]:
    """The instructions of ``path``: comments dropped, continuation lines joined."""
    instructions: list[Instruction] = []
    pending, start = "", 0
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue  # a comment inside a continued instruction
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        text = pending + line
        pending = ""
        keyword, _, args = text.partition(" ")
        instructions.append(Instruction(keyword.upper(), args.strip(), start))
    return instructions


def final_stage(instructions: list[Instruction]) -> list[Instruction]:
    """The instructions of the last stage (the image that runs)."""
    starts = [i for i, ins in enumerate(instructions) if ins.keyword == "FROM"]
    return instructions[starts[-1] :]


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def runtimes() -> dict[str, dict[str, Any]]:
    """The ServingRuntimes of servingruntime.yaml by name."""
    return {doc["metadata"]["name"]: doc for doc in documents(RUNTIMES)}


def container(runtime: dict[str, Any]) -> dict[str, Any]:
    """The runtime's one container (KServe merges the InferenceService's model spec into the
    container named kserve-container)."""
    containers = runtime["spec"]["containers"]
    assert [c["name"] for c in containers] == ["kserve-container"]
    return dict(containers[0])
