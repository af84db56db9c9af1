"""TorchServe 0.12's behaviour where its clients see it (issue 12, items 16, 17, 19 and 20), end to
end: archives built with ``podium archive``, a real ``podium serve``, the requests TorchServe's
clients send (httpx over HTTP; stubs generated from TorchServe's own protos over gRPC).

- 16: TorchServe's sequence-continuous-batching handler streams, and a later request of the
  same sequence (-1) stops the running stream at its next step (both in one step, as
  TorchServe's frontend batches them);
- 17: registering another version leaves the default alone until set-default;
- 19: ``GET /predictions/{m}`` runs the handler; segments after the version reach it as the
  ``url_path`` header; errors are ``{"code", "type", "message"}`` with TorchServe's types;
- 20: the gRPC management ``msg`` texts, and describe's TorchServe 0.12 fields.

``tests/conformance`` runs the same requests against the real TorchServe (docs/conformance.md).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import httpx
import pytest
from conftest import TEST_MODELS, Server, run_server
from e2e_helpers import PATIENCE, EventLog
from helpers import wait_until
from management_helpers import torchserve_management_stubs

pytest_plugins = ["grpc_fixtures"]

TS_MODELS = TEST_MODELS / "torchserve"
SEQ = "ts_request_sequence_id"


def _archive(name: str, store: Path, version: str, filename: str | None = None) -> Path:
    src = TS_MODELS / name
    cmd = [sys.executable, "-m", "podium", "archive", "--model-name", name, "--version", version,
           "--handler", str(src / "handler.py"), "--export-path", str(store),
           "--config-file", str(src / "model-config.yaml")]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    made = store / f"{name}.mar"
    if filename is None:
        return made
    return made.rename(store / filename)


@pytest.fixture(scope="module")
def events(tmp_path_factory: pytest.TempPathFactory) -> EventLog:
    return EventLog(tmp_path_factory.mktemp("ts-conformance-events") / "events.jsonl")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("ts-conformance-store")
    _archive("echo", directory, "2.0", "echo_v2.mar")  # registered by the tests
    _archive("echo", directory, "3.0", "echo_v3.mar")
    _archive("echo", directory, "1.0")
    _archive("seq-stream", directory, "1.0")
    return directory


@pytest.fixture(scope="module")
def server(store: Path, events: EventLog) -> Iterator[Server]:
    # paths relative to the server's directory, as an operator types them (modelUrl shows them)
    with run_server(
        "echo.mar",
        "seq-stream.mar",
        args=("--model-store", str(store)),
        env={"PODIUM_E2E_EVENTS": str(events.path)},
        cwd=store,
    ) as running:
        yield running


@pytest.fixture
async def infer(server: Server) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, timeout=PATIENCE) as c:
        yield c


@pytest.fixture
async def api(server: Server) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.management_url, timeout=PATIENCE) as c:
        yield c


@pytest.fixture(scope="module")
def mgmt(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    return torchserve_management_stubs(tmp_path_factory.mktemp("ts-conformance-stubs"))


# -- 16. continuous batching inside a sequence -------------------------------------------------


async def _stream(infer: httpx.AsyncClient, sid: str, body: bytes, chunks: list[str]) -> int:
    async with infer.stream(
        "POST", "/predictions/seq-stream", content=body, headers={SEQ: sid}
    ) as r:
        async for chunk in r.aiter_text():
            chunks.append(chunk)
        return r.status_code


def first_id(response: httpx.Response) -> str:
    """The sequence id a response carries (its first header line: the handler sets the header
    too, and until issue 12's item 15 is merged Podium sends its own line as well)."""
    return response.headers.get_list(SEQ)[0]


async def _first_chunk(chunks: list[str]) -> None:
    await wait_until(lambda: chunks, PATIENCE, every=0.01, what="the stream's first item")


def _steps_of(events: EventLog, sid: str) -> list[list[str]]:
    """The request ids of sequence ``sid`` in each step the handler ran for it, in order."""
    steps = ([rid for s, rid in e["batch"] if s == sid] for e in events.of("seq-stream"))
    return [step for step in steps if step]


@pytest.mark.anyio
async def test_a_sequence_streams_and_a_later_request_of_it_cancels_the_stream(
    infer: httpx.AsyncClient, events: EventLog
) -> None:
    first = await infer.post("/predictions/seq-stream", content=b"2")  # starts the sequence
    # (an int is JSON, a line per streamed item: the handler's answers are a stream here)
    assert (first.status_code, first.text) == (200, "2\n")
    sid = first_id(first)
    chunks: list[str] = []
    stream = asyncio.create_task(_stream(infer, sid, b"3", chunks))
    await _first_chunk(chunks)
    assert chunks[0] == "5\n"  # 2 + 3, then the running sum again at each step
    cancel = await infer.post("/predictions/seq-stream", content=b"-1", headers={SEQ: sid})
    assert (cancel.status_code, cancel.text) == (200, "-1\n")
    assert await stream == 200
    items = "".join(chunks).split()
    # streamed (an item per step), and stopped by the cancel before its 11 steps
    assert len(chunks) >= 2 and 2 <= len(items) < 11 and set(items) == {"5"}, chunks
    # the cancel ran in a step of the running stream, as TorchServe's frontend batches them,
    # and that step was the stream's last: an item for each of its steps, none after
    *earlier, last = _steps_of(events, sid)
    assert len(last) == 2, (earlier, last)  # the stream's request and the cancel
    (streamed,) = {rid for step in earlier for rid in step} & set(last)
    assert sum(streamed in step for step in [*earlier, last]) == len(items), (earlier, last)

    ended = await infer.post("/predictions/seq-stream", content=b"0", headers={SEQ: sid})
    assert ended.status_code == 200 and ended.headers["ts_request_sequence_end"] == sid
    after = await infer.post("/predictions/seq-stream", content=b"1", headers={SEQ: sid})
    assert after.status_code == 410


@pytest.mark.anyio
async def test_the_streams_of_two_sequences_share_the_workers_steps(
    infer: httpx.AsyncClient, events: EventLog
) -> None:
    sids = []
    for _ in range(2):
        start = await infer.post("/predictions/seq-stream", content=b"2")
        sids.append(first_id(start))
    chunks: list[list[str]] = [[], []]
    streams = [
        asyncio.create_task(_stream(infer, sid, b"1", out))
        for sid, out in zip(sids, chunks, strict=True)
    ]
    await _first_chunk(chunks[0])
    await _first_chunk(chunks[1])
    for sid in sids:
        cancel = await infer.post("/predictions/seq-stream", content=b"-1", headers={SEQ: sid})
        assert cancel.status_code == 200
    assert await asyncio.gather(*streams) == [200, 200]
    steps = [e["batch"] for e in events.of("seq-stream")]
    assert any({s for s, _ in b} == set(sids) for b in steps), steps
    for sid in sids:
        await infer.post("/predictions/seq-stream", content=b"0", headers={SEQ: sid})


@pytest.mark.anyio
async def test_torchserves_grpc_stream_predictions_streams_a_sequence(
    server: Server, ts: SimpleNamespace
) -> None:
    async with httpx.AsyncClient(base_url=server.url, timeout=PATIENCE) as infer:
        start = await infer.post("/predictions/seq-stream", content=b"4")
        sid = first_id(start)
    pb2 = ts.pb2
    async with grpc.aio.insecure_channel(server.addresses["grpc-inference"]) as channel:
        stub = ts.grpc.InferenceAPIsServiceStub(channel)
        request = pb2.PredictionsRequest(
            model_name="seq-stream", sequence_id=sid, input={"data": b"1"}
        )
        call = stub.StreamPredictions(request, timeout=PATIENCE)
        got = []
        async for reply in call:
            got.append(reply.prediction)
            if len(got) == 3:
                cancel = pb2.PredictionsRequest(
                    model_name="seq-stream", sequence_id=sid, input={"data": b"-1"}
                )
                answers = stub.StreamPredictions(cancel, timeout=PATIENCE)
                assert [a.prediction async for a in answers] == [b"-1"]
        assert 3 <= len(got) < 11 and set(got) == {b"5"}, got
        end = pb2.PredictionsRequest(model_name="seq-stream", sequence_id=sid, input={"data": b"0"})
        assert [a.prediction async for a in stub.StreamPredictions(end, timeout=PATIENCE)]


# -- 17. the default version after a registration ----------------------------------------------


@pytest.mark.anyio
async def test_registering_a_version_keeps_the_default_until_set_default(
    infer: httpx.AsyncClient, api: httpx.AsyncClient
) -> None:
    async def answering() -> str:
        r = await infer.post("/predictions/echo", json={"a": 1})
        assert r.status_code == 200, r.text
        return r.json()["version"]

    r = await api.post("/models?url=echo_v3.mar&initial_workers=1&synchronous=true")
    assert r.status_code == 200, r.text
    try:
        assert await answering() == "1.0"  # TorchServe: the first registered stays the default
        described = {
            d["modelVersion"]: d["default"] for d in (await api.get("/models/echo/all")).json()
        }
        assert described == {"1.0": True, "3.0": False}
        assert (await api.put("/models/echo/3.0/set-default")).status_code == 200
        assert await answering() == "3.0"
        assert (await api.put("/models/echo/1.0/set-default")).status_code == 200
        assert await answering() == "1.0"
    finally:
        await api.delete("/models/echo/3.0")
    assert await answering() == "1.0"


# -- 19. HTTP details ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_get_runs_the_handler_with_an_empty_body(infer: httpx.AsyncClient) -> None:
    r = await infer.get("/predictions/echo")
    assert r.status_code == 200, r.text
    assert r.json() == {
        "echo": "",
        "keys": ["body"],
        "version": "1.0",
        "url_path": "",
        "explain": "False",
    }
    assert (await infer.get("/predictions/echo/1.0")).json()["version"] == "1.0"


@pytest.mark.anyio
async def test_segments_after_the_version_reach_the_handler_as_url_path(
    infer: httpx.AsyncClient,
) -> None:
    r = await infer.post("/predictions/echo/1.0/extra/path", json={"a": 1})
    assert r.status_code == 200, r.text
    assert r.json()["echo"] == {"a": 1} and r.json()["url_path"] == "extra/path"
    r = await infer.put("/predictions/echo/1.0/one?x=1", content=b"hi")
    assert r.json()["url_path"] == "one"
    assert r.json()["keys"] == ["body"]  # as TorchServe 0.12: the query is not a parameter


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("method", "path", "body", "status", "kind"),
    [
        ("POST", "/predictions/echo/9.9", {"a": 1}, 404, "ModelVersionNotFoundException"),
        ("POST", "/predictions/nope", {"a": 1}, 404, "ModelNotFoundException"),
        ("POST", "/predictions/nope/1.0/x", {"a": 1}, 404, "ModelNotFoundException"),
        ("POST", "/predictions/echo", {"fail": "x"}, 500, "InternalServerException"),
        ("DELETE", "/predictions/echo", None, 405, "MethodNotAllowedException"),
        ("POST", "/predictions", None, 404, "ResourceNotFoundException"),
    ],
)
async def test_errors_on_torchserves_routes_are_in_its_shape(
    infer: httpx.AsyncClient, method: str, path: str, body: Any, status: int, kind: str
) -> None:
    r = await infer.request(method, path, json=body)
    assert r.status_code == status, r.text
    answer = r.json()
    assert set(answer) == {"code", "type", "message"}, answer
    assert (answer["code"], answer["type"]) == (status, kind)
    assert answer["message"]


# -- 20. management details ---------------------------------------------------------------------


@pytest.mark.anyio
async def test_grpc_management_msg_is_torchserves_text(
    server: Server, mgmt: SimpleNamespace
) -> None:
    pb2 = mgmt.pb2
    async with grpc.aio.insecure_channel(server.grpc_management) as channel:
        stub = mgmt.grpc.ManagementAPIsServiceStub(channel)
        reply = await stub.RegisterModel(
            pb2.RegisterModelRequest(url="echo_v2.mar", initial_workers=1, synchronous=True)
        )
        assert reply.msg == 'Model "echo" Version: 2.0 registered with 1 initial workers'
        try:
            reply = await stub.ScaleWorker(
                pb2.ScaleWorkerRequest(
                    model_name="echo", model_version="2.0", min_worker=1, synchronous=True
                )
            )
            assert reply.msg == "Workers scaled to 1 for model: echo, version: 2.0"
            for version in ("2.0", "1.0"):
                reply = await stub.SetDefault(
                    pb2.SetDefaultRequest(model_name="echo", model_version=version)
                )
                assert reply.msg == (
                    f'Default version successfully updated for model "echo" to "{version}"'
                )
            described = json.loads(
                (await stub.DescribeModel(pb2.DescribeModelRequest(model_name="echo"))).msg
            )
            assert described[0]["modelVersion"] == "1.0"  # list and describe stay JSON
        finally:
            reply = await stub.UnregisterModel(
                pb2.UnregisterModelRequest(model_name="echo", model_version="2.0")
            )
        assert reply.msg == 'Model "echo" unregistered'


#: Every key of TorchServe 0.12's description (``DescribeModelResponse``), as it answers.
TORCHSERVE_KEYS = {
    "modelName", "modelVersion", "modelUrl", "runtime", "minWorkers", "maxWorkers", "batchSize",
    "maxBatchDelay", "responseTimeout", "startupTimeout", "maxRetryTimeoutInSec",
    "clientTimeoutInMills", "parallelType", "parallelLevel", "deviceType", "continuousBatching",
    "useJobTicket", "useVenv", "stateful", "sequenceMaxIdleMSec", "sequenceTimeoutMSec",
    "maxNumSequence", "maxSequenceJobQueueSize", "loadedAtStartup", "workers", "jobQueueStatus",
}  # fmt: skip
TORCHSERVE_WORKER_KEYS = {"id", "startTime", "status", "memoryUsage", "pid", "gpu", "gpuUsage"}


@pytest.mark.anyio
async def test_describe_has_torchserves_fields(api: httpx.AsyncClient) -> None:
    (stateful,) = (await api.get("/models/seq-stream")).json()
    assert TORCHSERVE_KEYS <= set(stateful)
    assert list(stateful)[: len(TORCHSERVE_KEYS)] == [
        k for k in stateful if k in TORCHSERVE_KEYS
    ]  # TorchServe's fields first, in its order; Podium's additions after them
    assert stateful["stateful"] is True and stateful["continuousBatching"] is True
    assert stateful["sequenceMaxIdleMSec"] == 60000 and stateful["sequenceTimeoutMSec"] == 0
    assert stateful["maxNumSequence"] == 4 and stateful["maxSequenceJobQueueSize"] == 10
    assert stateful["jobQueueStatus"] == {"remainingCapacity": 1000, "pendingRequests": 0}
    (worker,) = stateful["workers"]
    assert TORCHSERVE_WORKER_KEYS <= set(worker)
    assert worker["memoryUsage"] > 0 and worker["gpu"] is False and worker["gpuUsage"] == "N/A"
    (echo,) = (await api.get("/models/echo")).json()
    assert echo["stateful"] is False and echo["deviceType"] == "cpu"
    assert echo["clientTimeoutInMills"] == 5000  # as its model-config.yaml says
    assert (echo["startupTimeout"], echo["maxRetryTimeoutInSec"]) == (120, 300)
    assert echo["modelUrl"] == "echo.mar"  # what the operator gave, as TorchServe shows it
