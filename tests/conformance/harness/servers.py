"""The three servers under comparison, each started on free loopback ports and always stopped.

- the real Triton Inference Server: the ``tritonserver`` binary that PyPI's ``nvidia-pytriton``
  bundles, laid out as PyTriton lays it out (the binary, ``backends/python`` with the stub built
  for this Python copied in), its python backend finding this Python's ``libpython`` through
  ``LD_LIBRARY_PATH``;
- the real TorchServe (Java), with token auth disabled and the model API enabled;
- Podium from this worktree (``python -m podium serve``).

Every process runs in its own session, so that stopping it (SIGTERM, then SIGKILL) also stops
what it started (Triton's python stubs, TorchServe's Python workers).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from .triton_layout import lay_out, triton_argv

HERE = Path(__file__).resolve().parent.parent
MODELS = HERE / "models"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Service:
    """A started server: its process, its log file and the addresses of its listeners."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    addr: dict[str, str] = field(default_factory=dict)
    version: str = ""

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        """SIGTERM the process group, SIGKILL it if it lingers; never raises."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                pass
        # The group may outlive its leader (TorchServe's launcher, Triton's stubs).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)


def _spawn(name: str, cmd: list[str], workdir: Path, env: dict[str, str]) -> Service:
    log = workdir / f"{name}.log"
    out = open(log, "wb")  # noqa: SIM115 - the child owns it
    proc = subprocess.Popen(
        cmd,
        cwd=workdir,
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    out.close()
    return Service(name, proc, log)


def _wait(service: Service, ready, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not service.alive():
            raise RuntimeError(
                f"{service.name} exited with {service.proc.returncode} before it was ready:\n"
                + service.log_text()[-4000:]
            )
        with contextlib.suppress(Exception):
            if ready():
                return
        time.sleep(0.5)
    raise TimeoutError(
        f"{service.name} was not ready within {timeout:.0f} s:\n" + service.log_text()[-4000:]
    )


def _http_ok(url: str) -> bool:
    return httpx.get(url, timeout=2).status_code == 200


# --- Triton -------------------------------------------------------------------------------


def start_triton(repositories: list[Path], workdir: Path, timeout: float = 180) -> Service:
    """The real ``tritonserver`` on 127.0.0.1, explicit model control with every model loaded
    (laid out by :mod:`harness.triton_layout`, which ``bench/perf_analyzer.py`` shares)."""
    install = lay_out(Path(sys.executable), workdir)
    http, grpc = free_port(), free_port()
    cmd = triton_argv(install, repositories, http, grpc)
    env = install.env
    service = _spawn("triton", cmd, workdir, env)
    service.addr = {"http": f"127.0.0.1:{http}", "grpc": f"127.0.0.1:{grpc}"}
    try:
        _wait(service, lambda: _http_ok(f"http://127.0.0.1:{http}/v2/health/ready"), timeout)
        service.version = httpx.get(f"http://127.0.0.1:{http}/v2").json().get("version", "")
    except BaseException:
        service.stop()
        raise
    return service


# --- TorchServe ---------------------------------------------------------------------------

TS_MODELS = ("ts_echo", "ts_stateful", "ts_capacity", "ts_stream", "ts_intermediate", "ts_explain")


def build_archives(store: Path, workdir: Path) -> None:
    """``torch-model-archiver`` builds a .mar of each handler in ``models/torchserve`` into
    ``store`` (the real archiver: both servers serve the same files), and a version 2.0 of
    ``ts_echo`` as ``ts_echo_v2.mar``."""
    archiver = str(Path(sys.executable).parent / "torch-model-archiver")
    store.mkdir(parents=True, exist_ok=True)
    jobs = [(name, "1.0", store, name) for name in TS_MODELS]
    # ts_capacity: ts_stateful's handler with TorchServe's default sequence capacity.
    jobs.append(("ts_echo", "2.0", workdir / "v2", "ts_echo_v2"))
    for name, version, dest, filename in jobs:
        src = MODELS / "torchserve" / name
        handler = src / "handler.py"
        if not handler.is_file():
            handler = MODELS / "torchserve" / "ts_stateful" / "handler.py"
        dest.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                archiver,
                "--model-name",
                name,
                "--version",
                version,
                "--handler",
                str(handler),
                "--config-file",
                str(src / "model-config.yaml"),
                "--export-path",
                str(dest),
                "--force",
            ],
            check=True,
            timeout=120,
            capture_output=True,
        )
        if filename != name:
            (dest / f"{name}.mar").rename(store / f"{filename}.mar")


def _ts_env(workdir: Path) -> dict[str, str]:
    """The environment TorchServe starts in: the venv's binaries first, its logs in
    ``workdir``."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    env["LOG_LOCATION"] = str(workdir / "logs")
    env["METRICS_LOCATION"] = str(workdir / "logs")
    return env


def start_torchserve(store: Path, workdir: Path, timeout: float = 240) -> Service:
    """The real TorchServe on 127.0.0.1 serving every archive of ``TS_MODELS``."""
    ports = {k: free_port() for k in ("inference", "management", "metrics", "grpc", "grpc_mgmt")}
    props = workdir / "config.properties"
    props.write_text(
        "\n".join(
            [
                f"inference_address=http://127.0.0.1:{ports['inference']}",
                f"management_address=http://127.0.0.1:{ports['management']}",
                f"metrics_address=http://127.0.0.1:{ports['metrics']}",
                "grpc_inference_address=127.0.0.1",
                "grpc_management_address=127.0.0.1",
                f"grpc_inference_port={ports['grpc']}",
                f"grpc_management_port={ports['grpc_mgmt']}",
                f"model_store={store}",
                "load_models=" + ",".join(f"{m}.mar" for m in TS_MODELS),
                "default_workers_per_model=1",
                "install_py_dep_per_model=false",
                "disable_token_authorization=true",
                "enable_model_api=true",
                "disable_system_metrics=true",
                "number_of_netty_threads=2",
                "job_queue_size=100",
                "",
            ]
        )
    )
    env = _ts_env(workdir)
    env["TS_CONFIG_FILE"] = str(props)
    cmd = [
        str(Path(sys.executable).parent / "torchserve"),
        "--start",
        "--foreground",
        "--ncs",
        "--disable-token-auth",
        "--enable-model-api",
        "--model-store",
        str(store),
        "--ts-config",
        str(props),
    ]
    service = _spawn("torchserve", cmd, workdir, env)
    service.addr = {
        "http": f"127.0.0.1:{ports['inference']}",
        "management": f"127.0.0.1:{ports['management']}",
        "grpc": f"127.0.0.1:{ports['grpc']}",
        "grpc_management": f"127.0.0.1:{ports['grpc_mgmt']}",
    }

    def ready() -> bool:
        for model in TS_MODELS:
            described = httpx.get(
                f"http://127.0.0.1:{ports['management']}/models/{model}", timeout=2
            ).json()
            workers = described[0].get("workers", [])
            if not any(w.get("status") == "READY" for w in workers):
                return False
        return True

    try:
        _wait(service, ready, timeout)
        service.version = _pkg_version("torchserve")
    except BaseException:
        service.stop()
        raise
    return service


# --- one config.properties, one start command, both servers (issue 22) ---------------------

SETUP_MODEL = "ts_metrics"


def build_setup_archive(store: Path) -> None:
    """``ts_metrics.mar`` (TorchServe's custom_metrics example's handler, without its model),
    by the real ``torch-model-archiver``."""
    src = MODELS / "torchserve" / SETUP_MODEL
    store.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            str(Path(sys.executable).parent / "torch-model-archiver"),
            "--model-name", SETUP_MODEL, "--version", "1.0",
            "--handler", str(src / "handler.py"),
            "--config-file", str(src / "model-config.yaml"),
            "--export-path", str(store), "--force",
        ],
        check=True, timeout=120, capture_output=True,
    )  # fmt: skip


def start_setup(which: str, store: Path, workdir: Path, timeout: float = 120) -> Service:
    """TorchServe (``which="torchserve"``) or Podium (``"podium"``) started by TorchServe's start
    command, ``torchserve --start --foreground --ncs --disable-token-auth --model-store STORE
    --models ts_metrics=ts_metrics.mar --ts-config config.properties`` (as the example's README
    starts it; Podium: ``python -m podium torchserve`` and the same
    flags), with the config.properties of TorchServe's examples/custom_metrics: its
    ``metrics_mode=prometheus``, ``metrics_config`` (the example's metrics.yaml),
    ``model_metrics_auto_detect=true`` and ``models={...}`` (marName, defaultVersion, one
    worker); each server's own free ports are the only lines that differ."""
    ports = {k: free_port() for k in ("inference", "management", "metrics", "grpc", "grpc_mgmt")}
    props = workdir / "config.properties"
    metrics_yaml = MODELS / "torchserve" / SETUP_MODEL / "metrics.yaml"
    props.write_text(
        "\n".join(
            [
                f"inference_address=http://127.0.0.1:{ports['inference']}",
                f"management_address=http://127.0.0.1:{ports['management']}",
                f"metrics_address=http://127.0.0.1:{ports['metrics']}",
                f"grpc_inference_port={ports['grpc']}",
                f"grpc_management_port={ports['grpc_mgmt']}",
                "install_py_dep_per_model=false",
                "disable_system_metrics=true",
                "metrics_mode=prometheus",
                f"metrics_config={metrics_yaml}",
                "model_metrics_auto_detect=true",
                "models={\\",
                f'  "{SETUP_MODEL}": {{\\',
                '    "1.0": {\\',
                '        "defaultVersion": true,\\',
                f'        "marName": "{SETUP_MODEL}.mar",\\',
                '        "minWorkers": 1,\\',
                '        "maxWorkers": 1\\',
                "    }\\",
                "  }\\",
                "}",
                "",
            ]
        )
    )
    env = _ts_env(workdir)
    env["TMPDIR"] = str(workdir)  # podium torchserve's pid file
    flags = ["--start", "--foreground", "--ncs", "--disable-token-auth",
             "--model-store", str(store), "--models", f"{SETUP_MODEL}={SETUP_MODEL}.mar",
             "--ts-config", str(props)]  # fmt: skip
    if which == "torchserve":
        cmd = [str(Path(sys.executable).parent / "torchserve"), *flags]
    else:
        cmd = [sys.executable, "-m", "podium", "torchserve", *flags]
    service = _spawn(f"{which}-setup", cmd, workdir, env)
    service.addr = {
        "http": f"127.0.0.1:{ports['inference']}",
        "management": f"127.0.0.1:{ports['management']}",
        "metrics": f"127.0.0.1:{ports['metrics']}",
        "grpc": f"127.0.0.1:{ports['grpc']}",
        "grpc_management": f"127.0.0.1:{ports['grpc_mgmt']}",
    }

    def ready() -> bool:
        described = httpx.get(
            f"http://127.0.0.1:{ports['management']}/models/{SETUP_MODEL}", timeout=2
        ).json()
        return any(w.get("status") == "READY" for w in described[0].get("workers", []))

    try:
        _wait(service, ready, timeout)
        service.version = _pkg_version("torchserve" if which == "torchserve" else "podium")
    except BaseException:
        service.stop()
        raise
    return service


# --- Podium -------------------------------------------------------------------------------

_READY = re.compile(r"Podium is ready; listening on (.*?); serving")


def start_podium(
    paths: list[Path], workdir: Path, store: Path, args: tuple[str, ...] = (), timeout=120
) -> Service:
    """``python -m podium serve PATHS`` on 127.0.0.1, every port free, management open (no key,
    as TorchServe with ``--disable-token-auth``), load/unload open on the inference ports
    (``--model-control inference``, as Triton's ``--model-control-mode=explicit``), and system
    shared memory on (as the Triton it is compared with: 2.51 has it on; from 2.69 Triton needs
    ``--allow-client-shm=true`` too)."""
    cmd = [
        sys.executable,
        "-m",
        "podium",
        "serve",
        *map(str, paths),
        "--host",
        "127.0.0.1",
        "--http-port",
        "0",
        "--grpc-port",
        "0",
        "--management-port",
        "0",
        "--grpc-management-port",
        "0",
        "--metrics-port",
        "0",
        "--no-auth",
        "--model-control",
        "inference",
        "--shared-memory",
        "system",
        "--model-store",
        str(store),
        *args,
    ]
    service = _spawn("podium", cmd, workdir, dict(os.environ))

    def ready() -> bool:
        found = _READY.search(service.log_text())
        if not found:
            return False
        tokens = found.group(1).split()
        names = dict(zip(tokens[::2], tokens[1::2], strict=False))
        strip = lambda a: a.split("://")[-1].rstrip("/")  # noqa: E731
        service.addr = {
            "http": strip(names["http-inference"]),
            "management": strip(names["http-management"]),
            "grpc": strip(names["grpc-inference"]),
            "grpc_management": strip(names["grpc-management"]),
        }
        return True

    try:
        _wait(service, ready, timeout)
        service.version = _pkg_version("podium")
    except BaseException:
        service.stop()
        raise
    return service


def _pkg_version(name: str) -> str:
    from importlib.metadata import version

    try:
        return version(name)
    except Exception:
        return "?"
