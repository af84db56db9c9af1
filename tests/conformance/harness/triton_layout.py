"""The real ``tritonserver`` that PyPI's ``nvidia-pytriton`` bundles, laid out so that it runs
here on CPU: the conformance harness (``servers.start_triton``) and ``bench/perf_analyzer.py``
both start Triton this way. Standard library only, so that code running in another Python
(the benchmark runs in the repository's venv) can import it.

PyTriton's wheel holds the server under ``pytriton/tritonserver`` (``bin/tritonserver``,
``backends/``, ``caches/``) with a python-backend stub built for each Python version in
``python_backend_stubs/<X.Y>/``, and the shared libraries they link (``libb64``, ``libcudart``,
…) in ``nvidia_pytriton.libs`` beside the package, under hashed names. :func:`lay_out` copies
the server into a work directory with the stub for the venv's Python in
``backends/python``; the python backend then needs that Python's own ``libpython`` on
``LD_LIBRARY_PATH``, and the venv's ``bin`` first on ``PATH`` (the stub's Python, with numpy).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["TritonInstall", "lay_out", "triton_argv"]

# Run by the venv's Python: where PyTriton is, which Python it is, and where its libpython lies.
_PROBE = """
import json, sys, sysconfig
from pathlib import Path
import pytriton
print(json.dumps({
    "package": str(Path(pytriton.__file__).resolve().parent),
    "version": f"{sys.version_info[0]}.{sys.version_info[1]}",
    "libdir": sysconfig.get_config_var("LIBDIR") or str(Path(sys.base_prefix) / "lib"),
}))
"""


@dataclass(frozen=True)
class TritonInstall:
    """A laid-out ``tritonserver``: its binary, its backend and cache directories, the
    bundled libraries' directory, and the environment it must run with."""

    binary: Path
    backends: Path
    caches: Path
    libs: Path
    env: dict[str, str]


def lay_out(python: Path, workdir: Path) -> TritonInstall:
    """Copy the ``tritonserver`` of the ``nvidia-pytriton`` installed for ``python`` (a venv's
    interpreter) into ``workdir/tritonserver``, with the python-backend stub for that Python.
    ``RuntimeError`` when PyTriton is not installed there or has no stub for that Python."""
    probe = subprocess.run([str(python), "-c", _PROBE], capture_output=True, text=True, timeout=120)
    if probe.returncode != 0:
        raise RuntimeError(f"{python} cannot import pytriton (nvidia-pytriton):\n{probe.stderr}")
    found = json.loads(probe.stdout)
    dist = Path(found["package"]) / "tritonserver"
    stub = dist / "python_backend_stubs" / found["version"] / "triton_python_backend_stub"
    if not stub.is_file():
        raise RuntimeError(f"nvidia-pytriton has no python backend stub for {found['version']}")
    server = workdir / "tritonserver"
    shutil.copytree(dist, server, ignore=shutil.ignore_patterns("python_backend_stubs"))
    shutil.copy(stub, server / "backends" / "python" / "triton_python_backend_stub")
    libs = dist.parent.parent / "nvidia_pytriton.libs"
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = ":".join(
        p for p in (str(libs), found["libdir"], env.get("LD_LIBRARY_PATH", "")) if p
    )
    env["PATH"] = f"{Path(python).parent}:{env['PATH']}"
    return TritonInstall(
        binary=server / "bin" / "tritonserver",
        backends=server / "backends",
        caches=server / "caches",
        libs=libs,
        env=env,
    )


def triton_argv(
    install: TritonInstall,
    repositories: list[Path],
    http_port: int,
    grpc_port: int,
    load: str = "*",
) -> list[str]:
    """The command line of a ``tritonserver`` on 127.0.0.1 with explicit model control, the
    models ``load`` names loaded (``*``: every model of the repositories), metrics and the
    cloud front ends off."""
    return [
        str(install.binary),
        *(f"--model-repository={r}" for r in repositories),
        f"--backend-directory={install.backends}",
        f"--cache-directory={install.caches}",
        "--http-address=127.0.0.1",
        f"--http-port={http_port}",
        "--grpc-address=127.0.0.1",
        f"--grpc-port={grpc_port}",
        "--allow-metrics=false",
        "--allow-sagemaker=false",
        "--allow-vertex-ai=false",
        "--model-control-mode=explicit",
        f"--load-model={load}",
        "--log-verbose=0",
        "--exit-timeout-secs=5",
    ]
