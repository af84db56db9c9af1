"""Fixtures shared by the end-to-end gRPC tests; a pytest plugin, loaded (after ``e2e_fixtures``)
with ``pytest_plugins = ["e2e_fixtures", "grpc_fixtures"]``. Test modules import helpers from
``grpc_helpers``, never from here.

``models_server`` (from ``e2e_fixtures``) serves ModelStreamInfer in the default ``mlserver``
framing; ``triton_server`` serves the same models with ``--grpc-stream-format triton`` and a
1 MiB ``--grpc-max-message-size``; ``aio_server`` with ``--grpc-threads 0`` (``grpc.aio``
instead of the thread-pool server), reached through ``aoip_both``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import SimpleNamespace

import grpc
import pytest
from conftest import Server, run_server
from e2e_helpers import MAX_REQUEST_SIZE, SERVE_MODELS
from grpc_helpers import MLSERVER_PROTO, Stubs, compile_proto, podium_messages, target


@pytest.fixture(scope="session")
def triton_server(events_path: Path) -> Iterator[Server]:
    with run_server(
        SERVE_MODELS,
        args=(
            "--grpc-stream-format",
            "triton",
            "--grpc-max-message-size",
            str(MAX_REQUEST_SIZE),
        ),
        env={"PODIUM_E2E_EVENTS": str(events_path)},
    ) as server:
        yield server


@pytest.fixture(scope="session")
def aio_server(events_path: Path) -> Iterator[Server]:
    """The models of ``models_server`` with gRPC served by ``grpc.aio`` (``--grpc-threads 0``)
    instead of the default thread-pool server."""
    with run_server(
        SERVE_MODELS,
        args=("--grpc-threads", "0"),
        env={"PODIUM_E2E_EVENTS": str(events_path)},
    ) as server:
        yield server


@pytest.fixture(params=["threads", "asyncio"])
async def aoip_both(
    request: pytest.FixtureRequest, models_server: Server, pb: SimpleNamespace
) -> AsyncIterator[Stubs]:
    """grpc.aio stubs on the mlserver-framing server, once for each gRPC front end: the default
    thread-pool server and ``grpc.aio`` (``--grpc-threads 0``)."""
    server = models_server if request.param == "threads" else request.getfixturevalue("aio_server")
    async with grpc.aio.insecure_channel(target(server)) as channel:
        yield Stubs(channel, pb, stream_output=pb.ModelInferResponse)


@pytest.fixture(scope="session")
def pb() -> SimpleNamespace:
    """Podium's own OIP message classes (checked field by field against Triton's)."""
    return podium_messages()


@pytest.fixture(scope="session")
def mlserver(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """An MLServer-style client's message classes, compiled from MLSERVER_PROTO."""
    return compile_proto(MLSERVER_PROTO, tmp_path_factory.mktemp("mlserver-proto"))


@pytest.fixture(scope="session")
def oip(models_server: Server, pb: SimpleNamespace) -> Iterator[Stubs]:
    """Blocking stubs on the mlserver-framing server."""
    with grpc.insecure_channel(target(models_server)) as channel:
        yield Stubs(channel, pb, stream_output=pb.ModelInferResponse)


@pytest.fixture
async def aoip(models_server: Server, pb: SimpleNamespace) -> AsyncIterator[Stubs]:
    """grpc.aio stubs on the mlserver-framing server."""
    async with grpc.aio.insecure_channel(target(models_server)) as channel:
        yield Stubs(channel, pb, stream_output=pb.ModelInferResponse)
