"""Helpers of the tests of the framework examples (scikit-learn, LightGBM, TorchServe with torch).

- :func:`need` imports a framework, or fails the test saying why (never a skip: a missing
  dependency is a broken install, and ``python3 dev.py test`` installs ``podium[examples]``).
- :func:`build_examples` copies the examples into a scratch folder and runs their own training
  and archiving scripts there (with this interpreter), so the tests never depend on, nor touch,
  what ``dev.py serve`` built in the checkout.
- :func:`peers_python` is an interpreter with MLServer 1.7 and TorchServe 0.12 installed (the
  real packages), for the tests that serve the same models with them present.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib
import importlib.util
import shutil
import subprocess
import sys
import sysconfig
import venv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest
from conftest import EXAMPLES, FRAMEWORK_EXAMPLES, ROOT

#: Where dev.py writes why ``podium[examples]`` could not be installed (read by :func:`need`).
INSTALL_LOG = Path(sys.prefix) / ".podium-examples-install.log"

#: The real peers, in the venv of :func:`peers_python` (the versions the examples name).
PEER_REQUIREMENTS = (
    "mlserver==1.7.1",
    "mlserver-sklearn==1.7.1",
    "mlserver-lightgbm==1.7.1",
    "torchserve==0.12.0",
)
#: Never another torch than the development venv's (a new one would be a multi-GB download).
PEER_CONSTRAINTS = ("torch==2.13.0",)
PEERS = ROOT / "tests" / ".venvs" / "peers"


def _missing(package: str, why: str) -> None:
    said = ""
    if INSTALL_LOG.is_file():
        said = "; dev.py's install said:\n" + INSTALL_LOG.read_text()[-3000:]
    pytest.fail(
        f"{package} is not installed ({why}); 'python3 dev.py test' installs podium[examples] "
        f"into .venv{said}",
        pytrace=False,
    )


def need(module: str, package: str | None = None) -> ModuleType:
    """``import module``, or fail the test with the reason (and dev.py's install log)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        _missing(package or module, f"{type(exc).__name__}: {exc}")
        raise  # not reached: pytest.fail raises


def need_installed(module: str, package: str) -> None:
    """Fail the test unless ``module`` can be found (not imported: MLServer's runtimes import
    ``mlserver``, which only Podium's model loader provides when MLServer is absent)."""
    if importlib.util.find_spec(module) is None:
        _missing(package, f"no module named {module!r}")


@dataclass(frozen=True)
class Built:
    """The examples, copied and built: the paths to serve and the files made."""

    root: Path

    @property
    def sklearn(self) -> Path:
        return self.root / "sklearn-iris"

    @property
    def sklearn_mlserver(self) -> Path:
        return self.root / "sklearn-iris-mlserver"

    @property
    def lightgbm(self) -> Path:
        return self.root / "lightgbm-iris"

    @property
    def model_store(self) -> Path:
        return self.root / "torchserve-mlp" / "model_store"

    @property
    def joblib_file(self) -> Path:
        return self.sklearn / "data" / "model.joblib"

    @property
    def booster_file(self) -> Path:
        return self.lightgbm / "model.bst"

    def serve_paths(self) -> list[Path]:
        return [self.sklearn, self.sklearn_mlserver, self.lightgbm, self.model_store]


def _script(path: Path, *args: str) -> None:
    done = subprocess.run(
        [sys.executable, str(path), *args], capture_output=True, text=True, timeout=300
    )
    if done.returncode != 0:
        pytest.fail(f"{path} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")


def build_examples(dest: Path) -> Built:
    """Copy the framework examples to ``dest`` and run their scripts there."""
    for module, package in (
        ("sklearn", "scikit-learn"),
        ("lightgbm", None),
        ("torch", None),
    ):
        need(module, package)
    need_installed("model_archiver", "torch-model-archiver")  # (its import leaks a file handle)
    need_installed("mlserver_sklearn", "mlserver-sklearn")
    need_installed("mlserver_lightgbm", "mlserver-lightgbm")
    generated = shutil.ignore_patterns("data", "model.bst", "model_store", "__pycache__")
    for name in FRAMEWORK_EXAMPLES:
        shutil.copytree(EXAMPLES / name, dest / name, ignore=generated)
    built = Built(dest)
    _script(built.sklearn / "train.py", "--out", str(built.sklearn / "data"))
    _script(built.lightgbm / "train.py", "--out", str(built.lightgbm))
    _script(built.root / "torchserve-mlp" / "build.py", "--out", str(built.model_store))
    return built


# -- the venv with the real MLServer and TorchServe ------------------------------------------------


def _stamp() -> str:
    text = "\n".join([*PEER_REQUIREMENTS, *PEER_CONSTRAINTS, sys.prefix, sys.version])
    return hashlib.sha256(text.encode()).hexdigest()


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # two test runs never build the venv at once
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def peers_python() -> str:
    """The python of ``tests/.venvs/peers``: MLServer 1.7.1, its sklearn and LightGBM runtimes
    and TorchServe 0.12.0 installed, everything else seen from this interpreter's environment.

    A ``.pth`` file adds this environment's site-packages after the venv's own, so torch,
    scikit-learn, Podium (editable) and the test tools are not installed twice; pip sees them as
    installed and adds only what the peers need beyond them (fastapi, an older starlette that
    shadows the newer one for MLServer's sake, ...), never touching this environment. Built once,
    then reused while :data:`PEER_REQUIREMENTS` and this interpreter stay the same (a stamp);
    about a minute the first time. Fails the test with pip's output if it cannot be built."""
    python = PEERS / "bin" / "python"
    marker = PEERS / ".podium-peers"
    with _locked(PEERS.parent / ".peers.lock"):
        if marker.is_file() and marker.read_text() == _stamp() and python.is_file():
            return str(python)
        shutil.rmtree(PEERS, ignore_errors=True)
        venv.EnvBuilder(with_pip=True).create(PEERS)
        purelib = sysconfig.get_paths(vars={"base": str(PEERS), "platbase": str(PEERS)})["purelib"]
        ours = sysconfig.get_paths()["purelib"]
        Path(purelib, "_podium_dev_env.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
        constraints = PEERS / "constraints.txt"
        constraints.write_text("\n".join(PEER_CONSTRAINTS) + "\n")
        done = subprocess.run(
            [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
            + ["-c", str(constraints), *PEER_REQUIREMENTS],
            capture_output=True,
            text=True,
            timeout=1200,
        )
        if done.returncode != 0:
            pytest.fail(
                f"could not install {', '.join(PEER_REQUIREMENTS)} into {PEERS} "
                f"(pip exited {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}",
                pytrace=False,
            )
        marker.write_text(_stamp())
    return str(python)
