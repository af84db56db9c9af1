"""Token authorization on the gRPC inference listener (``--auth``): every inference RPC needs the
inference key in its ``authorization`` metadata, nothing of a refused call runs, and health stays
open. Run against both gRPC modes (relayed, and ``grpc.aio`` with ``--grpc-aio``)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from conftest import Server, run_server
from e2e_helpers import PATIENCE, SERVE_MODELS, EventLog
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_helpers import Stubs, infer_request, outputs, target

pytest_plugins = ["e2e_fixtures", "grpc_fixtures"]


@pytest.fixture(scope="module", params=[(), ("--grpc-aio",)], ids=["relayed", "aio"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, events_path: Path
) -> Iterator[Server]:
    key_file = tmp_path_factory.mktemp("grpc-auth") / "key_file.json"
    with run_server(
        SERVE_MODELS / "gated",
        args=(
            "--auth",
            "--key-file",
            str(key_file),
            *request.param,
            "--grpc-stream-format",
            "mlserver",  # the stubs read bare ModelInferResponse
        ),
        env={"PODIUM_E2E_EVENTS": str(events_path)},
    ) as running:
        running.key_file = key_file  # type: ignore[attr-defined]
        yield running


def key(server: Server, kind: str) -> tuple[tuple[str, str], ...]:
    data = json.loads(server.key_file.read_text())  # type: ignore[attr-defined]
    return (("authorization", f"Bearer {data[kind]['key']}"),)


def test_inference_rpcs_need_the_inference_key(server: Server, pb: Any, events: EventLog) -> None:
    tag = uuid.uuid4().hex
    with grpc.insecure_channel(target(server)) as channel:
        stubs = Stubs(channel, pb, stream_output=pb.ModelInferResponse)
        for metadata in ((), key(server, "management"), (("authorization", "Bearer nope"),)):
            with pytest.raises(grpc.RpcError) as unary:
                stubs.ModelInfer(infer_request(pb, "gated", tag=tag), metadata=metadata)
            assert unary.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "inference" in (unary.value.details() or "")
            with pytest.raises(grpc.RpcError) as streamed:
                list(
                    stubs.ModelStreamInfer(
                        iter([infer_request(pb, "gated", tag=tag)]), metadata=metadata
                    )
                )
            assert streamed.value.code() == grpc.StatusCode.UNAUTHENTICATED
            with pytest.raises(grpc.RpcError) as ready:
                stubs.ServerReady(pb.ServerReadyRequest(), metadata=metadata)
            assert ready.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert events.of(tag) == []  # nothing of a refused call ran

        own = key(server, "inference")
        response = stubs.ModelInfer(
            infer_request(pb, "gated", tag=tag), metadata=own, timeout=PATIENCE
        )
        assert outputs(response)["tag"] == [tag.encode()]
        streamed_ok = list(
            stubs.ModelStreamInfer(iter([infer_request(pb, "gated", tag=tag + "s")]), metadata=own)
        )
        assert [outputs(r)["tag"] for r in streamed_ok] == [[(tag + "s").encode()]]


def test_health_stays_open(server: Server) -> None:
    with grpc.insecure_channel(target(server)) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        answer = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=PATIENCE)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING


def test_a_key_check_needs_the_access_wrapper() -> None:
    """The key is checked in the wrapper that writes each call's access line: a server given
    ``authorize`` without ``access`` would check nothing, so it is refused when made."""
    from podium.server.grpc import GrpcServer

    with pytest.raises(ValueError, match="give access"):
        GrpcServer([], host="127.0.0.1", port=0, max_message_size=1 << 20, authorize=lambda _: None)
