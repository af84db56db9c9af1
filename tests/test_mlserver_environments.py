"""MLServer's ``environment_tarball`` (and ``environment_path``), end to end (issue 22, section 3):
two MLServer models whose tarballs hold conflicting versions of one package, served by one
server, each in worker processes started from its own unpacked environment, the server's own
environment untouched; and the rules of safe extraction, each with its refusal."""

from __future__ import annotations

import io
import json
import sys
import tarfile
import textwrap
from pathlib import Path

import httpx
import pytest
from conftest import run_server
from test_cli import podium

from podium.runtime.environments import EnvironmentFailed, unpack, use_existing

PY = f"python{sys.version_info.major}.{sys.version_info.minor}"

RUNTIME = """
import os

import podium_tarball_probe
from mlserver import MLModel
from mlserver.codecs import StringCodec
from mlserver.types import InferenceRequest, InferenceResponse


class Probe(MLModel):
    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        path = os.environ["PATH"].split(os.pathsep)[0]
        answer = {"value": podium_tarball_probe.VALUE, "path": path, "pid": os.getpid()}
        return InferenceResponse(
            model_name=self.name, outputs=[StringCodec.encode_output("a", [str(answer)])]
        )
"""


def _tarball(path: Path, files: dict[str, bytes], python: str = PY) -> Path:
    """A venv-like environment tarball, as conda-pack lays one out: ``lib/pythonX.Y/
    site-packages/...`` and ``bin/`` (``files``' paths are under the environment)."""
    with tarfile.open(path, "w:gz") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name.replace("PY", python))
            info.size = len(data)
            info.mode = 0o755 if name.startswith("bin/") else 0o644
            archive.addfile(info, io.BytesIO(data))
    return path


def _probe_tarball(path: Path, value: str) -> Path:
    return _tarball(
        path,
        {
            "lib/PY/site-packages/podium_tarball_probe/__init__.py": f"VALUE = {value!r}\n".encode(),
            "bin/probe-tool": b"#!/bin/sh\necho probe\n",
        },
    )


def _model(folder: Path, name: str, tarball: str) -> None:
    folder.mkdir(parents=True)
    (folder / "models.py").write_text(textwrap.dedent(RUNTIME))
    settings = {"name": name, "implementation": "models.Probe",
                "parameters": {"environment_tarball": tarball}}  # fmt: skip
    (folder / "model-settings.json").write_text(json.dumps(settings))


def _ask(url: str, name: str) -> dict[str, object]:
    body = {"inputs": [{"name": "x", "datatype": "BYTES", "shape": [1], "data": ["?"]}]}
    r = httpx.post(f"{url}/v2/models/{name}/infer", json=body, timeout=60)
    assert r.status_code == 200, r.text
    answer: dict[str, object] = eval(r.json()["outputs"][0]["data"][0])  # noqa: S307 (our repr)
    return answer


def test_two_models_with_conflicting_tarballs_share_one_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PODIUM_ENVS", str(tmp_path / "envs"))
    repo = tmp_path / "repo"
    _model(repo / "old", "old", "env.tar.gz")  # relative to its model-settings.json
    _probe_tarball(repo / "old" / "env.tar.gz", "1.0")
    _model(repo / "new", "new", str(tmp_path / "new-env.tgz"))
    _probe_tarball(tmp_path / "new-env.tgz", "2.0")
    with run_server(repo) as server:
        old, new = _ask(server.url, "old"), _ask(server.url, "new")
    assert (old["value"], new["value"]) == ("1.0", "2.0")
    assert old["pid"] != server.proc.pid  # a worker process
    assert str(old["path"]).endswith("/tarball/bin")  # its programs first on PATH
    unpacked = sorted(p.name for p in (tmp_path / "envs").iterdir())
    assert len(unpacked) == 2 and all(n.startswith("tarball-") for n in unpacked)
    with pytest.raises(ImportError):  # nothing leaked into the server's environment
        __import__("podium_tarball_probe")
    # `podium install` prepares them ahead: the same cached environments
    installed = podium("install", repo, timeout=120)
    assert installed.returncode == 0, installed.stderr
    assert installed.stdout.count("its own environment in") == 2
    assert sorted(p.name for p in (tmp_path / "envs").iterdir()) == unpacked


def test_environment_path_uses_an_environment_where_it_is(tmp_path: Path) -> None:
    folder = tmp_path / "env"
    (folder / "lib" / PY / "site-packages").mkdir(parents=True)
    env = use_existing(folder, label="model 'm'", root=tmp_path / "envs")
    pth = next(env.path.glob("lib/python*/site-packages/podium-server.pth")).read_text()
    assert pth.splitlines()[0] == str(folder / "lib" / PY / "site-packages")


@pytest.mark.parametrize(
    ("files", "python", "words"),
    [
        ({"../escape.py": b"x"}, PY, "is refused"),
        ({"lib/PY/site-packages/x.py": b"x" * 2048}, PY, "expands to more than the 1024 bytes"),
        ({"lib/PY/site-packages/x.py": b"x"}, "python2.7", "was built for python2.7"),
        ({"bin/tool": b"x"}, PY, "has no lib/pythonX.Y/site-packages"),
    ],
)
def test_unsafe_or_unusable_tarballs_are_refused(
    tmp_path: Path, files: dict[str, bytes], python: str, words: str
) -> None:
    tarball = _tarball(tmp_path / "env.tgz", files, python)
    root = tmp_path / "envs"
    with pytest.raises(EnvironmentFailed, match=words) as caught:
        unpack(tarball, label="model 'm'", root=root, max_bytes=1024)
    assert "model 'm'" in caught.value.message
    assert not (tmp_path / "escape.py").exists()
    assert not any(p.name.startswith("tarball-") for p in root.glob("*"))  # nothing looks ready


def test_an_absolute_name_lands_inside_the_environment(tmp_path: Path) -> None:
    name = f"/tmp/podium-escape-{tmp_path.name}.py"
    files = {name: b"x", "lib/PY/site-packages/ok.py": b""}
    env = unpack(_tarball(tmp_path / "env.tgz", files), label="model 'm'", root=tmp_path / "e")
    assert not Path(name).exists()  # tarfile's data filter strips the leading '/'
    assert (env.path / "tarball" / name.lstrip("/")).is_file()


def test_a_link_out_of_the_environment_is_refused(tmp_path: Path) -> None:
    tarball = tmp_path / "env.tgz"
    with tarfile.open(tarball, "w:gz") as archive:
        link = tarfile.TarInfo(f"lib/{PY}/site-packages/passwd")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        archive.addfile(link)
    with pytest.raises(EnvironmentFailed, match="is refused"):
        unpack(tarball, label="model 'm'", root=tmp_path / "envs")


def test_too_many_members_are_refused(tmp_path: Path) -> None:
    files = {f"lib/PY/site-packages/m{i}.py": b"" for i in range(5)}
    tarball = _tarball(tmp_path / "env.tgz", files)
    with pytest.raises(EnvironmentFailed, match="more than 3 members"):
        unpack(tarball, label="model 'm'", root=tmp_path / "envs", max_members=3)


def test_a_model_whose_tarball_is_missing_does_not_load(tmp_path: Path) -> None:
    _model(tmp_path / "m", "m", "missing.tgz")
    result = podium("serve", tmp_path / "m", "--http-port", "0", "--grpc-port", "0",
                    "--management-port", "0", "--grpc-management-port", "0",
                    "--metrics-port", "0", "--host", "127.0.0.1", timeout=60)  # fmt: skip
    assert result.returncode == 1
    assert "its environment tarball" in result.stderr and "missing.tgz is not a file" in (
        result.stderr
    )


def test_an_extraction_past_its_time_is_refused(tmp_path: Path) -> None:
    tarball = _tarball(tmp_path / "env.tgz", {"lib/PY/site-packages/a.py": b""})
    with pytest.raises(EnvironmentFailed, match="took more than 0 s to extract"):
        unpack(tarball, label="model 'm'", root=tmp_path / "envs", timeout=0)


def test_check_makes_the_environment_instead_of_importing_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PODIUM_ENVS", str(tmp_path / "envs"))
    _model(tmp_path / "m", "m", "env.tgz")
    _probe_tarball(tmp_path / "m" / "env.tgz", "1.0")
    checked = podium("check", tmp_path / "m", timeout=60)
    assert checked.returncode == 0, checked.stderr  # its import needs the tarball's package
    assert "1 model(s) checked, no problems" in checked.stdout
    (tmp_path / "m" / "env.tgz").write_bytes(b"not a tarball")
    broken = podium("check", tmp_path / "m", timeout=60)
    assert broken.returncode == 1 and "cannot be extracted" in broken.stderr
