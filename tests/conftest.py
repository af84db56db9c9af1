"""Shared fixtures: a real Podium server in a subprocess, on a free port, always stopped; and the
settings profiles of the property tests (hypothesis)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
TEST_MODELS = Path(__file__).resolve().parent / "models"

# Property tests (hypothesis). "dev" explores new random examples on every run (a failure is
# replayed first on the next run from the local .hypothesis/ database, and its seed is printed);
# "ci" is the same but derandomized, so a red CI run fails the same way when run again with the
# same commit; "deep" (HYPOTHESIS_PROFILE=deep) runs 20 times as many examples, for a long hunt.
# No deadline: on a loaded 2-core machine a slow example is not a bug (pytest-timeout still
# catches a hang).
settings.register_profile("dev", max_examples=100, deadline=None, print_blob=True)
settings.register_profile("ci", settings.get_profile("dev"), derandomize=True, database=None)
settings.register_profile("deep", settings.get_profile("dev"), max_examples=2000)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
)

_READY = re.compile(r"Podium is ready; listening on (.*?); serving")


@dataclass
class Server:
    """A running ``podium serve``: its addresses and everything it logged so far."""

    proc: subprocess.Popen[str]
    addresses: dict[str, str] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.addresses["http-inference"]

    @property
    def management_url(self) -> str:
        """The management REST listener (``http-management`` in the ready line)."""
        return self.addresses["http-management"]

    @property
    def grpc_management(self) -> str:
        """``host:port`` of the gRPC management listener (``grpc-management``)."""
        return self.addresses["grpc-management"]

    @property
    def log(self) -> str:
        return "\n".join(self.lines)


def uninstall_import_paths(alias: str) -> None:
    """Take Podium's import paths for ``alias`` (``mlserver``, ``ts``) away again, for a test
    that starts without them: the finder (``podium.compat._aliases``) and the modules imported
    through it; a real package's modules are left alone."""
    sys.meta_path[:] = [f for f in sys.meta_path if getattr(f, "alias", None) != alias]
    for name in [n for n in sys.modules if n == alias or n.startswith(alias + ".")]:
        if getattr(sys.modules[name], "__name__", "").startswith("podium.compat."):
            del sys.modules[name]


@contextlib.contextmanager
def run_server(
    *paths: str | Path,
    args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    timeout: float = 60.0,
    default_auth: bool = False,
    cwd: Path | None = None,
    python: str = sys.executable,
) -> Iterator[Server]:
    """Start ``podium serve PATHS`` on 127.0.0.1 with ports 0 (HTTP and gRPC, inference and
    management); yield once it logs ready. ``args`` come last, so they may name other ports.

    With ``--no-auth`` (the management API open to its callers, so that tests need no key),
    unless ``args`` say ``--auth``; ``default_auth``: neither, the server's default (the
    management key). ``cwd``: the server's working directory (default: the tests').
    ``python``: the interpreter that runs Podium (another venv's, for the real peers)."""
    cmd = [
        python,
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
        *(() if default_auth else ("--no-auth",)),
        *args,
    ]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
        start_new_session=True,
        cwd=cwd,
    )
    server = Server(proc)
    ready = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            server.lines.append(line.rstrip("\n"))
            found = _READY.search(line)
            if found:
                tokens = found.group(1).split()
                server.addresses.update(dict(zip(tokens[::2], tokens[1::2], strict=False)))
                ready.set()
        ready.set()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + timeout
        while not ready.wait(0.05):
            if time.monotonic() > deadline:
                raise TimeoutError(f"podium did not become ready:\n{server.log}")
        if not server.addresses:
            raise RuntimeError(f"podium exited with {proc.wait()} before ready:\n{server.log}")
        yield server
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        reader.join(5)
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.hookimpl(trylast=True)  # after ``-m`` has deselected what it deselects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test's ``default`` run is left out where its ``deep`` run (a slow test) runs as well,
    as under ``dev.py test`` and CI: the deep run asks the same questions with more examples
    (tests/server/test_openapi_fuzz.py), and most of either run's time is what both make
    first (the schema's strategies), so the default one would add time and no check."""
    deep = {item.nodeid.removesuffix("[deep]") for item in items if item.nodeid.endswith("[deep]")}
    left = [
        i for i in items if i.nodeid.endswith("[default]") and i.nodeid[: -len("[default]")] in deep
    ]
    if left:
        gone = set(map(id, left))
        items[:] = [i for i in items if id(i) not in gone]
        config.hook.pytest_deselected(items=left)


#: Examples that need podium[examples] (scikit-learn, LightGBM, torch, MLServer's published
#: runtimes) and files that their own scripts make: tests/examples/ serves them from a built copy.
FRAMEWORK_EXAMPLES = ("sklearn-iris", "sklearn-iris-mlserver", "lightgbm-iris", "torchserve-mlp")


def default_examples() -> list[Path]:
    """The examples ``python3 dev.py serve`` serves: all but the opt-in ones (dev.py's
    ``OPT_IN_EXAMPLES``, real models that take seconds to load; tests/examples/ serve those)."""
    spec = importlib.util.spec_from_file_location("podium_dev_script", ROOT / "dev.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {ROOT / 'dev.py'}")
    dev = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dev)
    return list(dev.example_paths())


@pytest.fixture(scope="session")
def examples_server() -> Iterator[Server]:
    """One server with the bundled examples that ``dev.py serve`` serves but the framework
    ones (built by their own scripts; tests/examples/ serves them), shared by the tests that
    only read from it."""
    paths = [path for path in default_examples() if path.name not in FRAMEWORK_EXAMPLES]
    with run_server(*paths) as server:
        yield server


# tests/conformance/ is the side-by-side harness with the real Triton and TorchServe: its own
# venv and command (python3 tests/conformance/run.py), never part of this test run.
collect_ignore = ["conformance"]
