"""Fixtures shared by the end-to-end HTTP tests; a pytest plugin, not a conftest.py.

Test modules load it with ``pytest_plugins = ["e2e_fixtures"]``, so its session fixtures (one
server per set of test models) are shared by every module. It is deliberately not a
``conftest.py``: without ``__init__.py`` files a second ``conftest.py`` would take the module
name ``conftest`` from ``tests/conftest.py`` and break ``from conftest import ...`` everywhere.
Test modules must not import this module themselves (it would escape assertion rewriting).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from conftest import Server, run_server
from e2e_helpers import FAILING_MODELS, MAX_REQUEST_SIZE, PATIENCE, SERVE_MODELS, EventLog, Gates


@pytest.fixture(scope="session")
def events_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("e2e-events") / "events.jsonl"


@pytest.fixture(scope="session")
def models_server(events_path: Path) -> Iterator[Server]:
    """One server for every model in tests/models/serve, with a 1 MiB request limit; gRPC
    ModelStreamInfer in MLServer's framing (``triton_server`` serves Triton's, the default)."""
    with run_server(
        SERVE_MODELS,
        args=(
            "--max-request-size",
            str(MAX_REQUEST_SIZE),
            "--grpc-stream-format",
            "mlserver",
        ),
        env={"PODIUM_E2E_EVENTS": str(events_path)},
    ) as server:
        yield server


@pytest.fixture(scope="session")
def failing_server() -> Iterator[Server]:
    """A server where model 'failing' failed to load and model 'fine' is ready."""
    with run_server(FAILING_MODELS) as server:
        yield server


@pytest.fixture(scope="session")
def events(events_path: Path) -> EventLog:
    return EventLog(events_path)


@pytest.fixture
def tag() -> str:
    return uuid.uuid4().hex


@pytest.fixture
def gates(tmp_path: Path) -> Iterator[Gates]:
    made = Gates(tmp_path)
    yield made
    made.open_all()


@pytest.fixture
async def client(models_server: Server) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=models_server.url, timeout=PATIENCE) as c:
        yield c
