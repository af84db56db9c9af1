"""Per-model environments: requirements installed apart from the server's, cached by their
hash, the server's packages after the environment's own, failures with pip's last lines."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from wheels import make_wheel

from podium.runtime import environments
from podium.runtime.environments import EnvironmentFailed, install


@pytest.fixture
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """pip reads only a folder of wheels made here: probe 1.0 and 2.0."""
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "podium_probe", "1.0", "VERSION = '1.0'\n")
    make_wheel(wheels, "podium_probe", "2.0", "VERSION = '2.0'\n")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    return tmp_path / "envs"


def _run(python: Path, code: str) -> str:
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_conflicting_versions_get_environments_of_their_own(offline: Path) -> None:
    one = install(["podium_probe==1.0"], label="model 'a'", root=offline)
    two = install(["podium_probe==2.0"], label="model 'b'", root=offline)
    assert one.path != two.path
    assert _run(one.python, "import podium_probe; print(podium_probe.VERSION)") == "1.0"
    assert _run(two.python, "import podium_probe; print(podium_probe.VERSION)") == "2.0"
    # the server's own packages are there too, after the environment's
    assert _run(one.python, "import podium, numpy, msgspec; print('ok')") == "ok"
    with pytest.raises(ImportError):
        import podium_probe  # noqa: F401  (nothing reached the server's environment)


def test_the_same_requirements_are_installed_once(
    offline: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = install(["podium_probe==1.0"], label="model 'a'", root=offline)

    def no_pip(*args: object, **kwargs: object) -> None:
        raise AssertionError("pip ran again for a cached environment")

    monkeypatch.setattr(environments.subprocess, "run", no_pip)
    again = install([" podium_probe==1.0 "], label="model 'b'", root=offline)
    assert again.path == first.path


def test_a_failed_install_names_the_model_and_ends_with_pips_lines(offline: Path) -> None:
    with pytest.raises(EnvironmentFailed) as info:
        install(["podium_probe==9.9"], label="model 'x'", root=offline)
    message = info.value.message
    assert message.startswith("model 'x': installing its requirements (podium_probe==9.9) failed")
    assert "No matching distribution found for podium_probe==9.9" in message
    assert not any(offline.iterdir()), "a failed install leaves nothing behind"


def test_an_install_past_its_time_or_size_limit_fails(offline: Path) -> None:
    with pytest.raises(EnvironmentFailed) as info:
        install(["podium_probe==1.0"], label="model 'x'", root=offline, max_bytes=1)
    assert "more than the 1 allowed" in info.value.message
    with pytest.raises(EnvironmentFailed) as info:
        install(["podium_probe==2.0"], label="model 'y'", root=offline, timeout=0.001)
    assert "took more than 0.001 s" in info.value.message
