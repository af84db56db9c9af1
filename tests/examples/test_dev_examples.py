"""What ``dev.py`` does for the framework examples: installs their libraries (a failure is
written down for the tests to report, and the rest of the suite still runs) and, for ``serve``,
runs their scripts where the files they make are missing."""

from __future__ import annotations

import importlib.machinery
import importlib.metadata
import importlib.util
import stat
import subprocess
from pathlib import Path
from types import ModuleType

import pytest
from conftest import ROOT


def _dev() -> ModuleType:
    spec = importlib.util.spec_from_file_location("podium_dev_script_examples", ROOT / "dev.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_runtimes_dev_py_installs_are_installed_here_without_mlserver() -> None:
    for requirement in _dev().EXAMPLE_RUNTIMES:
        name, _, version = requirement.partition("==")
        assert importlib.metadata.version(name) == version, requirement
    assert importlib.machinery.PathFinder.find_spec("mlserver") is None  # --no-deps: never MLServer


def test_a_failed_install_is_written_down_and_not_fatal(tmp_path: Path) -> None:
    env = tmp_path / "venv"
    (env / "bin").mkdir(parents=True)
    pip = env / "bin" / "python"
    pip.write_text(
        "#!/bin/sh\necho 'ERROR: No matching distribution found for torch' >&2\nexit 1\n"
    )
    pip.chmod(pip.stat().st_mode | stat.S_IEXEC)
    _dev()._install_examples(env, "stamp")  # returns: the other tests still run
    log = (env / ".podium-examples-install.log").read_text()
    assert "No matching distribution found for torch" in log and "torch==" in log
    assert not (env / ".podium-examples-installed").exists()  # tried again next time


def test_serve_builds_what_is_missing_and_serves_the_model_store(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    dev = _dev()
    ran: list[tuple[str, ...]] = []
    monkeypatch.setattr(dev, "ROOT", tmp_path)
    monkeypatch.setattr(dev, "_run", lambda *cmd: ran.append(cmd) or 0)
    (tmp_path / "examples/lightgbm-iris").mkdir(parents=True)
    (tmp_path / "examples/lightgbm-iris/model.bst").write_text("made before")
    (tmp_path / "examples/torchserve-mlp/model_store").mkdir(parents=True)
    assert dev._build_examples() == [str(tmp_path / "examples/torchserve-mlp/model_store")]
    scripts = [cmd[-1] for cmd in ran]
    assert scripts == [
        str(tmp_path / "examples/sklearn-iris/train.py"),
        str(tmp_path / "examples/torchserve-mlp/build.py"),
    ]


def test_what_the_scripts_make_is_not_committed() -> None:
    made = [*_dev().EXAMPLE_BUILDS, *(f"{store}/" for store in _dev().EXAMPLE_STORES)]
    done = subprocess.run(
        ["git", "check-ignore", *made], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert sorted(done.stdout.split()) == sorted(made)
    for script in _dev().EXAMPLE_BUILDS.values():
        assert (ROOT / script).is_file()
