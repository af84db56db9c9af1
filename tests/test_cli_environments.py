"""Models with requirements of their own, end to end: ``podium install`` and ``podium serve
--install-model-requirements`` with two trusses that need conflicting versions of one package
(installed from wheels made here, with no package index)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import httpx
import pytest
from test_cli import podium, serving
from wheels import make_wheel

PORTS = ("--host", "127.0.0.1", "--http-port", "0", "--grpc-port", "0", "--management-port",
         "0", "--grpc-management-port", "0", "--metrics-port", "0")  # fmt: skip

MODEL = """
import os
import podium_probe


class Model:
    def predict(self, model_input):
        return {"version": podium_probe.VERSION, "flag": os.environ.get("PROBE_FLAG")}
"""


def _truss(root: Path, name: str, requirement: str) -> Path:
    (root / "model").mkdir(parents=True)
    (root / "model" / "model.py").write_text(textwrap.dedent(MODEL))
    (root / "config.yaml").write_text(
        f"model_name: {name}\nrequirements: ['{requirement}']\n"
        f"environment_variables: {{PROBE_FLAG: {name}}}\n"
    )
    return root


@pytest.fixture
def trusses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "podium_probe", "1.0", "VERSION = '1.0'\n")
    make_wheel(wheels, "podium_probe", "2.0", "VERSION = '2.0'\n")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    monkeypatch.setenv("PODIUM_ENVS", str(tmp_path / "envs"))
    repo = tmp_path / "repo"
    _truss(repo / "old", "old", "podium_probe==1.0")
    _truss(repo / "new", "new", "podium_probe==2.0")
    return repo


def test_install_then_serve_models_with_conflicting_requirements(trusses: Path) -> None:
    installed = podium("install", trusses, timeout=120)
    assert installed.returncode == 0, installed.stderr
    assert "ok: model 'new'" in installed.stdout and "podium_probe==2.0" in installed.stdout
    # without the flag, the server's own environment lacks the package: a clear refusal
    refused = podium("serve", trusses, *PORTS)
    assert refused.returncode == 1
    assert "pip install podium_probe==1.0" in refused.stderr
    with serving(trusses, *PORTS, "--install-model-requirements") as url:
        base = url.replace("0.0.0.0", "127.0.0.1")
        old = httpx.post(base + "/v1/models/old:predict", json={}, timeout=30)
        new = httpx.post(base + "/v1/models/new:predict", json={}, timeout=30)
        assert old.json() == {"version": "1.0", "flag": "old"}
        assert new.json() == {"version": "2.0", "flag": "new"}


def test_an_install_that_fails_says_why_and_exits_1(trusses: Path) -> None:
    config = trusses / "new" / "config.yaml"
    config.write_text(config.read_text().replace("podium_probe==2.0", "podium_probe==7.0"))
    result = podium("install", trusses, timeout=120)
    assert result.returncode == 1
    assert "model 'new'" in result.stderr
    assert "No matching distribution found for podium_probe==7.0" in result.stderr
    assert "ok: model 'old'" in result.stdout and "podium_probe==1.0 in " in result.stdout


def test_a_native_model_s_requirements_txt_is_its_environment(
    trusses: Path, tmp_path: Path
) -> None:
    native = tmp_path / "native" / "probe"
    native.mkdir(parents=True)
    (native / "model.py").write_text(textwrap.dedent(MODEL))
    (native / "requirements.txt").write_text("# the model's own\npodium_probe==2.0\n")
    installed = podium("install", native, timeout=120)
    assert installed.returncode == 0, installed.stderr
    assert "ok: model 'probe'" in installed.stdout and "podium_probe==2.0" in installed.stdout
    with serving(native, *PORTS, "--install-model-requirements") as url:
        base = url.replace("0.0.0.0", "127.0.0.1")
        answer = httpx.post(base + "/v1/models/probe:predict", json={}, timeout=30)
        assert answer.json() == {"version": "2.0", "flag": None}
