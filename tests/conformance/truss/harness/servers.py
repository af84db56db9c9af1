"""The two servers, each serving one truss on a free loopback port, always stopped.

- Truss's own model server (the ``truss`` package's ``templates/server``), run without Docker: the
  truss is laid out by Truss's own image builder (``ServingImageBuilderContext``, which writes the
  build directory and its Dockerfile) and Truss's own ``DockerBuildEmulator`` (which applies the
  Dockerfile's COPY/ENV/WORKDIR to a folder standing for the image's root), as Truss's own tests
  do (``truss/tests/conftest.py::_build_truss_fs``); then ``truss_launch.py`` runs ``main.py``;
- Podium from this checkout: ``python -m podium serve TRUSS`` with the repository's ``.venv``
  (``PODIUM_PYTHON`` or ``--podium-python`` to use another), ``src/`` first on the path.

Each process runs in its own session, stopped with SIGTERM, then SIGKILL."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent.parent
ROOT = HERE.parent.parent.parent
LAUNCH = Path(__file__).resolve().parent / "truss_launch.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Service:
    """A started server: its process, log file and ``host:port``."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    addr: str

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        """SIGTERM the process group, SIGKILL it if it lingers; never raises. (Truss's server
        waits up to an hour for open requests on SIGTERM: 10 s is all it gets here.)"""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)


def _base_env(home: Path) -> dict[str, str]:
    home.mkdir(parents=True, exist_ok=True)
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def _spawn(
    name: str, cmd: list[str], cwd: Path, env: dict[str, str], log: Path
) -> subprocess.Popen:
    out = open(log, "wb")  # noqa: SIM115 - the child owns it
    try:
        return subprocess.Popen(
            cmd,
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    finally:
        out.close()


def _write_secrets(folder: Path, secrets: dict[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for key, value in secrets.items():
        (folder / key).write_text(value)


def lay_out_truss(truss_dir: Path, workdir: Path) -> tuple[Path, dict[str, Any]]:
    """Truss's image file system for ``truss_dir`` under ``workdir/fs``; returns it and the ENV
    the Dockerfile sets."""
    from truss.contexts.image_builder.serving_image_builder import ServingImageBuilderContext
    from truss.contexts.local_loader.docker_build_emulator import DockerBuildEmulator

    build = workdir / "build"
    fs = workdir / "fs"
    build.mkdir(parents=True)
    fs.mkdir(parents=True)
    ServingImageBuilderContext.run(truss_dir).prepare_image_build_dir(build)
    result = DockerBuildEmulator(build / "Dockerfile", build).run(fs)
    return fs, dict(result.env)


def start_truss(
    truss_dir: Path,
    workdir: Path,
    *,
    env: dict[str, str],
    secret_files: dict[str, str],
    wait: str,
    timeout: float = 90,
) -> Service:
    """Truss's server for ``truss_dir``: laid out, started, and waited for as ``wait`` says."""
    fs, image_env = lay_out_truss(truss_dir, workdir)
    _write_secrets(fs / "secrets", secret_files)
    port = free_port()
    config = yaml.safe_load((truss_dir / "config.yaml").read_text()) or {}
    child_env = _base_env(workdir / "home")
    child_env["APP_HOME"] = str(fs / "app")
    child_env["INFERENCE_SERVER_PORT"] = str(port)
    child_env["DISABLE_JSON_LOGGING"] = "true"
    # `truss docker run` passes the config's environment_variables to the container.
    child_env.update({k: str(v) for k, v in (config.get("environment_variables") or {}).items()})
    child_env.update(env)
    cmd = [sys.executable, str(LAUNCH), str(fs)]
    log = workdir / "truss.log"
    proc = _spawn("truss", cmd, fs / "app", child_env, log)
    service = Service("truss", proc, log, f"127.0.0.1:{port}")
    _wait(service, wait, timeout)
    return service


def podium_python(explicit: str | None) -> Path:
    if explicit:
        return Path(explicit)
    return ROOT / ".venv" / "bin" / "python"


def start_podium(
    truss_dir: Path,
    workdir: Path,
    *,
    python: Path,
    env: dict[str, str],
    secret_files: dict[str, str],
    wait: str,
    timeout: float = 90,
) -> Service:
    """``podium serve`` of a copy of ``truss_dir`` (Podium may write into it, as Truss writes
    into its image's ``/app``)."""
    copy = workdir / "truss" / truss_dir.name
    shutil.copytree(truss_dir, copy)
    port = free_port()
    cmd = [str(python), "-m", "podium", "serve", str(copy), "--host", "127.0.0.1"]
    cmd += ["--http-port", str(port)]
    for flag in ("--grpc-port", "--management-port", "--grpc-management-port", "--metrics-port"):
        cmd += [flag, "0"]
    if secret_files:
        _write_secrets(workdir / "secrets", secret_files)
        cmd += ["--secrets-dir", str(workdir / "secrets")]
    child_env = _base_env(workdir / "home")
    child_env["PYTHONPATH"] = str(ROOT / "src")
    child_env.update(env)
    log = workdir / "podium.log"
    proc = _spawn("podium", cmd, workdir, child_env, log)
    service = Service("podium", proc, log, f"127.0.0.1:{port}")
    # Podium logs this line once every model is loaded and its sockets are bound: ready, even
    # where its /v1/models/model still differs from Truss's.
    _wait(service, wait, timeout, ready_line="Podium is ready; listening on")
    return service


def _status(addr: str, path: str) -> int | None:
    import httpx

    try:
        return httpx.get(f"http://{addr}{path}", timeout=2).status_code
    except httpx.HTTPError:
        return None


def _wait(service: Service, wait: str, timeout: float, ready_line: str = "") -> None:
    """``ready``: until ``GET /v1/models/model`` is 200; ``live``: until the port answers HTTP;
    ``exit``: until the process exits (a truss that cannot load) or ``timeout`` passes, which is
    not an error (what happens is the observation); ``any``: until it answers HTTP or exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not service.alive():
            if wait in ("exit", "any"):
                return
            service.stop()
            raise RuntimeError(
                f"{service.name} exited with {service.proc.returncode} before it was {wait}:\n"
                + service.log_text()[-3000:]
            )
        if wait == "ready" and _status(service.addr, "/v1/models/model") == 200:
            return
        if wait == "ready" and ready_line and ready_line in service.log_text():
            return
        if wait in ("live", "any") and _status(service.addr, "/") is not None:
            return
        time.sleep(0.3)
    if wait == "exit":
        return
    text = service.log_text()[-3000:]
    service.stop()
    raise TimeoutError(f"{service.name} was not {wait} within {timeout:.0f} s:\n{text}")
