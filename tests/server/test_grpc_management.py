"""TorchServe's gRPC management API end to end, through stubs generated from TorchServe's own
management.proto, against a real ``podium serve``: every RPC, the reply's ``msg`` carrying
TorchServe's status text (register, scale, set-default, unregister) or the REST JSON (list,
describe), and errors as statuses from the one table (NOT_FOUND, ALREADY_EXISTS,
INVALID_ARGUMENT)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from types import SimpleNamespace
from typing import Any

import grpc
import httpx
import pytest
from conftest import TEST_MODELS, Server, run_server
from e2e_helpers import PATIENCE, SERVE_MODELS
from management_helpers import torchserve_management_stubs

MANAGEMENT_MODELS = TEST_MODELS / "management"


@pytest.fixture(scope="module")
def ts(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    return torchserve_management_stubs(tmp_path_factory.mktemp("ts-management-stubs"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    store = tmp_path_factory.mktemp("grpc-model-store")
    (store / "store_echo.py").write_bytes((MANAGEMENT_MODELS / "store_echo.py").read_bytes())
    # --allow-any-local-path: models come from the test models' own directories.
    args = ("--model-store", str(store), "--allow-any-local-path")
    with run_server(SERVE_MODELS / "versioned", args=args) as running:
        yield running


@pytest.fixture
async def stub(server: Server, ts: SimpleNamespace) -> AsyncIterator[Any]:
    async with grpc.aio.insecure_channel(server.grpc_management) as channel:
        yield ts.grpc.ManagementAPIsServiceStub(channel)


async def status_of(call: Any) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value.code(), caught.value.details() or ""


@pytest.mark.anyio
async def test_register_describe_list_and_unregister(
    stub: Any, ts: SimpleNamespace, server: Server
) -> None:
    pb2 = ts.pb2
    url = str(SERVE_MODELS / "emit")
    reply = await stub.RegisterModel(
        pb2.RegisterModelRequest(url=url, model_name="g-emit", max_batch_delay=7, synchronous=True)
    )
    # TorchServe's msg: the status text itself (issue 12, item 20)
    assert reply.msg == 'Model "g-emit" registered with 1 initial workers'
    async with httpx.AsyncClient(base_url=server.url, timeout=PATIENCE) as client:
        answer = await client.post("/predictions/g-emit", json={"kind": "number"})
        assert answer.json() == 42

    (described,) = json.loads(
        (await stub.DescribeModel(pb2.DescribeModelRequest(model_name="g-emit"))).msg
    )
    assert described["modelUrl"] == url and described["maxBatchDelay"] == 7
    # The msg is the REST body, byte for byte in meaning (less the server's memory, which
    # a thread worker reports as its own and which moves between two calls).
    async with httpx.AsyncClient(base_url=server.management_url, timeout=PATIENCE) as api:
        rest = (await api.get("/models/g-emit")).json()
    for entry in (*rest, described):
        for worker in entry["workers"]:
            assert worker.pop("memoryUsage") > 0
    assert rest == [described]

    listed = json.loads((await stub.ListModels(pb2.ListModelsRequest())).msg)
    assert [m["modelName"] for m in listed["models"]] == ["g-emit", "versioned"]
    first = json.loads((await stub.ListModels(pb2.ListModelsRequest(limit=1))).msg)
    assert first["nextPageToken"] == "1" and len(first["models"]) == 1
    second = json.loads(
        (await stub.ListModels(pb2.ListModelsRequest(limit=1, next_page_token=1))).msg
    )
    assert [m["modelName"] for m in second["models"]] == ["versioned"]
    assert "nextPageToken" not in second

    reply = await stub.UnregisterModel(pb2.UnregisterModelRequest(model_name="g-emit"))
    assert reply.msg == 'Model "g-emit" unregistered'
    code, _ = await status_of(stub.DescribeModel(pb2.DescribeModelRequest(model_name="g-emit")))
    assert code == grpc.StatusCode.NOT_FOUND


@pytest.mark.anyio
async def test_register_without_synchronous_loads_in_the_background(
    stub: Any, ts: SimpleNamespace
) -> None:
    pb2 = ts.pb2  # proto3: synchronous is false unless set, as in TorchServe
    reply = await stub.RegisterModel(pb2.RegisterModelRequest(url="store_echo.py"))
    assert reply.msg == "Processing worker updates..."
    await stub.UnregisterModel(pb2.UnregisterModelRequest(model_name="store_echo"))


@pytest.mark.anyio
async def test_describe_all_and_set_default(stub: Any, ts: SimpleNamespace) -> None:
    pb2 = ts.pb2
    every = json.loads(
        (
            await stub.DescribeModel(
                pb2.DescribeModelRequest(model_name="versioned", model_version="all")
            )
        ).msg
    )
    assert [v["modelVersion"] for v in every] == ["1", "2", "10"]
    reply = await stub.SetDefault(pb2.SetDefaultRequest(model_name="versioned", model_version="1"))
    assert reply.msg == 'Default version successfully updated for model "versioned" to "1"'
    try:
        (default,) = json.loads(
            (await stub.DescribeModel(pb2.DescribeModelRequest(model_name="versioned"))).msg
        )
        assert default["modelVersion"] == "1"
    finally:
        await stub.SetDefault(pb2.SetDefaultRequest(model_name="versioned", model_version="10"))


@pytest.mark.anyio
async def test_errors_are_statuses_from_the_one_table(stub: Any, ts: SimpleNamespace) -> None:
    pb2 = ts.pb2
    code, details = await status_of(
        stub.RegisterModel(pb2.RegisterModelRequest(url=str(SERVE_MODELS / "versioned")))
    )
    assert code == grpc.StatusCode.ALREADY_EXISTS and "already registered" in details
    code, details = await status_of(
        stub.RegisterModel(pb2.RegisterModelRequest(url="https://example.com/model.mar"))
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "--allowed-urls" in details
    code, details = await status_of(stub.RegisterModel(pb2.RegisterModelRequest()))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "url is required" in details
    code, details = await status_of(stub.RegisterModel(pb2.RegisterModelRequest(url="missing.mar")))
    assert code == grpc.StatusCode.NOT_FOUND and "missing.mar" in details
    code, _ = await status_of(
        stub.SetDefault(pb2.SetDefaultRequest(model_name="versioned", model_version="5"))
    )
    assert code == grpc.StatusCode.NOT_FOUND
    code, _ = await status_of(stub.UnregisterModel(pb2.UnregisterModelRequest(model_name="none")))
    assert code == grpc.StatusCode.NOT_FOUND
    code, details = await status_of(
        stub.ScaleWorker(pb2.ScaleWorkerRequest(model_name="versioned", min_worker=3, max_worker=2))
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "max_worker" in details
    # read as REST's query is (Scaling.parse): a negative count names its field and the rule
    code, details = await status_of(
        stub.ScaleWorker(pb2.ScaleWorkerRequest(model_name="versioned", min_worker=-1))
    )
    assert (
        code == grpc.StatusCode.INVALID_ARGUMENT and "min_worker must be an integer >= 0" in details
    )
    code, details = await status_of(stub.DescribeModel(pb2.DescribeModelRequest()))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "model_name" in details


@pytest.mark.anyio
async def test_scale_worker(stub: Any, ts: SimpleNamespace) -> None:
    pb2 = ts.pb2
    reply = await stub.ScaleWorker(
        pb2.ScaleWorkerRequest(
            model_name="versioned", model_version="2", min_worker=2, synchronous=True
        )
    )
    assert reply.msg == "Workers scaled to 2 for model: versioned, version: 2"
    (described,) = json.loads(
        (
            await stub.DescribeModel(
                pb2.DescribeModelRequest(model_name="versioned", model_version="2")
            )
        ).msg
    )
    assert len(described["workers"]) == 2
    await stub.ScaleWorker(
        pb2.ScaleWorkerRequest(
            model_name="versioned", model_version="2", min_worker=1, synchronous=True
        )
    )


@pytest.mark.anyio
async def test_all_names_no_version_to_scale_or_unregister(stub: Any, ts: SimpleNamespace) -> None:
    """As on REST (``DELETE /models/m/all`` is a 400): only describe reads ``all``."""
    pb2 = ts.pb2
    for call in (
        stub.UnregisterModel(
            pb2.UnregisterModelRequest(model_name="versioned", model_version="all")
        ),
        stub.ScaleWorker(
            pb2.ScaleWorkerRequest(model_name="versioned", model_version="all", min_worker=1)
        ),
    ):
        code, details = await status_of(call)
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert "'all' names no version" in details
    listed = json.loads((await stub.ListModels(pb2.ListModelsRequest())).msg)
    assert "versioned" in [m["modelName"] for m in listed["models"]]


def test_the_service_matches_torchserves_declaration(ts: SimpleNamespace) -> None:
    """Same messages, field names, numbers and types as TorchServe's own file."""
    from google.protobuf import descriptor_pb2

    from podium.server.grpc._pool import POOL

    theirs = ts.pb2.DESCRIPTOR
    for name, message in theirs.message_types_by_name.items():
        ours = POOL.FindMessageTypeByName(f"org.pytorch.serve.grpc.management.{name}")
        a, b = descriptor_pb2.DescriptorProto(), descriptor_pb2.DescriptorProto()
        message.CopyToProto(a)
        ours.CopyToProto(b)
        assert [(f.name, f.number, f.type, f.label) for f in a.field] == [
            (f.name, f.number, f.type, f.label) for f in b.field
        ], name
    service = POOL.FindServiceByName("org.pytorch.serve.grpc.management.ManagementAPIsService")
    assert sorted(m.name for m in service.methods) == sorted(
        m.name for m in theirs.services_by_name["ManagementAPIsService"].methods
    )
