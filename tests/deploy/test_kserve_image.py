"""deploy/kserve/Dockerfile built with podman and run as KServe would run it: the echo example at
/mnt/models, KServe's own clients over REST and gRPC through the published ports, the image's
health check, a non-root user under tini, and a graceful stop on SIGTERM.

Slow (about three minutes the first time, about one once podman holds the layers) and needs
podman (and, the first time, debootstrap, as root): Debian's packages, which CI's clean checkout
with only Python does not have, so there it is skipped with that reason in the summary
(docs/kserve.md, "What the tests check"); hadolint and test_kserve_recipe.py check the Dockerfile
in every run. No container registry is reached: the base image is a Debian bookworm made here with
debootstrap from Debian's packages; the build itself reaches Debian (tini) and PyPI (Podium's
dependencies), through this host's network and trusted certificates.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import EXAMPLES, ROOT
from kserve_fixtures import DOCKERFILE, SENT, run_sdk, tools_python

__all__ = ["tools_python"]  # the fixture, imported for the test below

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

PODMAN = shutil.which("podman")
#: A Debian bookworm with python3 (3.11) and venv, made by debootstrap, kept in podman's store.
BASE = "localhost/podium-test-base:bookworm"
IMAGE = "localhost/podium-kserve:test"
DEBIAN_MIRROR = os.environ.get("PODIUM_TEST_DEBIAN_MIRROR", "http://deb.debian.org/debian")
#: The host's trusted certificates and a pip.conf naming them, mounted into the build's RUN
#: steps: where TLS to PyPI passes through an intercepting proxy (as on this project's machines)
#: the image's own certificates would not trust it. The recipe itself does not depend on it.
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")


def _podman(*args: str, timeout: float = 60, check: bool = True) -> str:
    """``podman ARGS``' output (``podman logs``: the container's stdout and stderr together)."""
    assert PODMAN is not None
    done = subprocess.run(
        [PODMAN, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if args[0] == "logs" else subprocess.PIPE,
        text=True,
        timeout=timeout,
    )
    if check and done.returncode != 0:
        pytest.fail(f"podman {' '.join(args[:2])} exited {done.returncode}:\n{done.stderr}")
    return done.stdout.strip()


def _container_flags() -> list[str]:
    """What every container needs on a host like this one. Podman asks for nofile 1048576 and
    nproc 4194304, more than a root without CAP_SYS_RESOURCE may set: ask for the host's own
    limits instead (nproc capped, as runc refuses more here). crun 1.8 (Debian 12) refuses hosts
    with cgroups v1 and v2 both mounted; runc runs there."""
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    nproc = min(resource.getrlimit(resource.RLIMIT_NPROC)[0], 16384)
    flags = ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}"]
    if shutil.which("runc"):
        flags += ["--runtime", "runc"]
    return flags


def _ensure_base(tmp: Path) -> None:
    if subprocess.run([str(PODMAN), "image", "exists", BASE]).returncode == 0:
        return
    debootstrap = shutil.which("debootstrap")
    if debootstrap is None or os.geteuid() != 0:
        pytest.skip(
            "the KServe image is not built: its base image needs debootstrap, as root"
            " (apt-get install debootstrap; docs/kserve.md); hadolint checked the Dockerfile"
        )
    rootfs = tmp / "rootfs"
    include = "python3,python3-venv,ca-certificates"
    subprocess.run(
        [debootstrap, "--variant=minbase", f"--include={include}", "bookworm", str(rootfs)]
        + [DEBIAN_MIRROR],
        check=True,
        capture_output=True,
        timeout=900,
    )
    shutil.rmtree(rootfs / "var/cache/apt/archives", ignore_errors=True)
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
    imported = subprocess.run(
        [str(PODMAN), "import", "--change", 'CMD ["/bin/bash"]', "-", BASE],
        stdin=tar.stdout,
        capture_output=True,
        timeout=300,
    )
    assert tar.stdout is not None
    tar.stdout.close()
    assert tar.wait() == 0 and imported.returncode == 0, imported.stderr


def _build(tmp: Path) -> None:
    mounts = []
    if HOST_CA.exists():
        pip_conf = tmp / "pip.conf"
        pip_conf.write_text(f"[global]\ncert = {HOST_CA}\n")
        mounts = ["-v", f"{HOST_CA}:{HOST_CA}:ro", "-v", f"{pip_conf}:/etc/pip.conf:ro"]
    _podman(
        "build",
        *_container_flags(),
        *mounts,
        "--network",
        "host",
        "--format",
        "docker",  # OCI images have no HEALTHCHECK
        "--build-arg",
        f"BASE_IMAGE={BASE}",
        "-f",
        str(DOCKERFILE),
        "-t",
        IMAGE,
        str(ROOT),
        timeout=900,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _container(http: int, grpc: int) -> Iterator[str]:
    name = f"podium-kserve-test-{uuid.uuid4().hex[:8]}"
    _podman(
        "run",
        "--detach",
        "--name",
        name,
        *_container_flags(),
        "-p",
        f"127.0.0.1:{http}:8080",
        "-p",
        f"127.0.0.1:{grpc}:8081",
        "-v",
        f"{EXAMPLES / 'echo'}:/mnt/models/echo:ro",
        IMAGE,
    )
    try:
        yield name
    finally:
        _podman("rm", "--force", "--time", "0", name, check=False)


def _wait_ready(name: str, url: str, within: float = 90) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/v2/health/ready", timeout=2).status_code == 200:
                return
        if _podman("inspect", "--format", "{{.State.Running}}", name) != "true":
            break
        time.sleep(0.5)
    logs = _podman("logs", name, check=False)
    pytest.fail(f"the container did not become ready within {within} s:\n{logs}")


@pytest.mark.skipif(
    PODMAN is None,
    reason="the KServe image is not built: podman is not installed (apt-get install podman runc"
    " debootstrap; docs/kserve.md); hadolint checked the Dockerfile",
)
def test_the_image_serves_kserve_clients_and_stops_gracefully(
    tools_python: Path, tmp_path: Path
) -> None:
    _ensure_base(tmp_path)
    _build(tmp_path)
    http, grpc = _free_port(), _free_port()
    with _container(http, grpc) as name:
        url = f"http://127.0.0.1:{http}"
        _wait_ready(name, url)

        answers = run_sdk(tools_python, "clients", url, f"127.0.0.1:{grpc}", "echo")
        rest, grpc_answers = answers["rest"], answers["grpc"]
        assert (rest["server_ready"], rest["model_ready"]) == (True, True)
        assert rest["infer_binary"] == {"outputs": SENT, "binary": True}
        assert (grpc_answers["server_ready"], grpc_answers["model_ready"]) == (True, True)
        assert grpc_answers["infer_json"] == SENT

        # the image's HEALTHCHECK (for docker run) passes
        _podman("healthcheck", "run", name)
        # Podium runs as uid 1000 under tini (PID 1), with the management key in its home
        assert _podman("exec", name, "id", "-u") == "1000"
        init = _podman("exec", name, "cat", "/proc/1/cmdline").split("\0")
        assert init[:3] == ["tini", "--", "podium"]
        assert _podman("exec", name, "ls", "/home/podium") == "key_file.json"

        # SIGTERM (podman stop) reaches Podium through tini: it drains and exits 0
        _podman("stop", "--time", "30", name, timeout=60)
        assert _podman("inspect", "--format", "{{.State.ExitCode}}", name) == "0"
        logs = _podman("logs", name)
        assert "shutting down on SIGTERM" in logs
        assert "stopped in" in logs
