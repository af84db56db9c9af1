"""Fixtures of the framework examples' tests; a pytest plugin (``pytest_plugins``), not a
conftest.py (see tests/server/e2e_fixtures.py for why). Test modules must not import it."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from collections.abc import Iterator

import pytest
from conftest import Server, run_server
from example_kit import Built, build_examples, peers_python

#: Seconds a server may take to import the frameworks and load every model (a loaded CI box).
STARTUP = 240.0


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The framework examples, copied and built once per session (about 20 s)."""
    return build_examples(tmp_path_factory.mktemp("framework-examples"))


@pytest.fixture(scope="session")
def podium_server(built: Built) -> Iterator[Server]:
    """The examples served by Podium alone: ``mlserver`` and ``ts`` are Podium's own
    (podium.compat), as MLServer and TorchServe are not installed in the development venv."""
    for module, package in (("mlserver", "MLServer"), ("ts", "TorchServe")):
        # the package itself on sys.path (Podium's import paths for it, podium.compat's alias
        # finder, may be in place from the in-process tests: they do not count)
        if importlib.machinery.PathFinder.find_spec(module) is not None:  # the point is lost
            pytest.fail(
                f"{package} ({module!r}) is installed in {sys.prefix}: the tests of Podium "
                "serving the peers' runtimes without them need a venv without it",
                pytrace=False,
            )
    with run_server(*built.serve_paths(), timeout=STARTUP) as server:
        yield server


@pytest.fixture(scope="session")
def peers_server(built: Built) -> Iterator[Server]:
    """The same examples served by Podium in a venv where MLServer 1.7.1 and TorchServe 0.12.0
    are installed: the runtimes and handlers import the real ``mlserver`` and ``ts``."""
    with run_server(*built.serve_paths(), timeout=STARTUP, python=peers_python()) as server:
        yield server


@pytest.fixture(params=["podium", pytest.param("peers", marks=pytest.mark.slow)])
def server(request: pytest.FixtureRequest) -> Server:
    """Each test of a runtime or handler runs against both servers (the peers' one is slow:
    its venv is built on first use)."""
    found: Server = request.getfixturevalue(f"{request.param}_server")
    return found
