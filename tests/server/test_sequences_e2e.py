"""Stateful sequences end to end: a real ``podium serve`` with sequence models, reached over the
Truss and TorchServe HTTP routes (TorchServe's headers), OIP REST (Triton's sequence parameters),
OIP gRPC and TorchServe gRPC (``StreamPredictions2`` carrying a sequence on one stream).
Judged by the running totals (which sequence saw what, in which order) and by the errors."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from types import SimpleNamespace
from typing import Any

import grpc
import httpx
import pytest
from conftest import TEST_MODELS, Server, run_server
from e2e_helpers import PATIENCE
from grpc_helpers import Stubs, target

pytest_plugins = ["e2e_fixtures", "grpc_fixtures"]

SEQ = "ts_request_sequence_id"


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    # MLServer's stream framing: test_oip_model_stream_infer_carries_a_sequence reads it.
    with run_server(
        TEST_MODELS / "sequences", args=("--grpc-stream-format", "mlserver")
    ) as running:
        yield running


@pytest.fixture
async def client(server: Server) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, timeout=PATIENCE) as c:
        yield c


async def add(client: httpx.AsyncClient, n: int, seq: str | None = None, **extra: Any) -> Any:
    headers = {SEQ: seq} if seq else {}
    headers.update({k: str(v) for k, v in extra.pop("headers", {}).items()})
    return await client.post(
        "/v1/models/running-sum:predict", json={"add": n, **extra}, headers=headers
    )


@pytest.mark.anyio
async def test_a_new_sequence_gets_an_id_that_keeps_its_state(client: httpx.AsyncClient) -> None:
    first = await add(client, 5)
    assert first.status_code == 200, first.text
    seq = first.headers[SEQ]
    assert first.json() == {"total": 5, "first": True, "sequence": seq}
    assert first.headers["x-running-total"] == "5"  # a header the model set
    second = await add(client, 7, seq)
    assert second.json() == {"total": 12, "first": False, "sequence": seq}
    assert second.headers[SEQ] == seq


@pytest.mark.anyio
async def test_interleaved_sequences_keep_their_own_state_and_order(
    client: httpx.AsyncClient,
) -> None:
    async def run(name: str, values: list[int]) -> list[int]:
        totals = []
        for v in values:
            r = await add(client, v, name)
            assert r.status_code == 200, r.text
            totals.append(r.json()["total"])
        return totals

    got = await asyncio.gather(
        run("seq-a", [1, 2, 3, 4]), run("seq-b", [10, 20, 30, 40]), run("seq-c", [100] * 4)
    )
    assert got == [[1, 3, 6, 10], [10, 30, 60, 100], [100, 200, 300, 400]]


@pytest.mark.anyio
async def test_ended_sequences_are_refused_with_the_reason(client: httpx.AsyncClient) -> None:
    r = await add(client, 1, "by-request")
    r = await add(client, 1, "by-request", headers={SEQ + "_end": "true"})
    assert r.status_code == 200 and r.headers[SEQ + "_end"] == "true"
    again = await add(client, 1, "by-request")
    assert again.status_code == 410, again.text
    assert "by-request" in again.json()["error"] and "ended by a request" in again.json()["error"]

    r = await add(client, 3, "by-model", finish=True)
    assert r.status_code == 200 and r.headers[SEQ + "_end"] == "true"
    again = await add(client, 1, "by-model")
    assert again.status_code == 410 and "ended by the model" in again.json()["error"]


@pytest.mark.anyio
async def test_idle_sequences_expire_and_too_many_are_refused(client: httpx.AsyncClient) -> None:
    url = "/v1/models/short-lived:predict"
    r = await client.post(url, json={"add": 1}, headers={SEQ: "idle-1"})
    assert r.status_code == 200
    await asyncio.sleep(0.6)  # idle past sequence_max_idle_ms (150 ms) and a sweep or two
    r = await client.post(url, json={"add": 1}, headers={SEQ: "idle-1"})
    assert r.status_code == 410 and "sequence_max_idle_ms" in r.json()["error"]
    for name in ("open-1", "open-2"):
        r = await client.post(url, json={"add": 1}, headers={SEQ: name})
        assert r.status_code == 200, r.text
    r = await client.post(url, json={"add": 1}, headers={SEQ: "open-3"})
    assert r.status_code == 503 and "max_num_sequences" in r.json()["error"]
    r = await client.post(url, json={"add": 2}, headers={SEQ: "open-1"})
    assert r.status_code == 200 and r.json() == {"total": 3}  # the others are not disturbed


@pytest.mark.anyio
async def test_torchserve_route_and_oip_rest_parameters(client: httpx.AsyncClient) -> None:
    r = await client.post("/predictions/running-sum", json={"add": 2}, headers={SEQ: "ts-1"})
    assert r.status_code == 200 and r.json()["total"] == 2 and r.headers[SEQ] == "ts-1"
    body = {
        "parameters": {"sequence_id": "ts-1"},
        "inputs": [{"name": "add", "shape": [1], "datatype": "INT64", "data": [3]}],
    }
    r = await client.post("/v2/models/running-sum/infer", json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["parameters"]["sequence_id"] == "ts-1"
    totals = {o["name"]: o["data"] for o in out["outputs"]}
    assert totals["total"] == [5]  # one sequence, whichever protocol


def test_oip_grpc_sequence_parameters(server: Server, pb: SimpleNamespace) -> None:
    with grpc.insecure_channel(target(server)) as channel:
        stubs = Stubs(channel, pb)
        totals = []
        for n, end in ((1, False), (2, False), (3, True)):
            request = pb.ModelInferRequest(model_name="running-sum")
            request.parameters["sequence_id"].string_param = "grpc-1"
            request.parameters["sequence_start"].bool_param = n == 1
            request.parameters["sequence_end"].bool_param = end
            tensor = request.inputs.add(name="add", datatype="INT64", shape=[1])
            tensor.contents.int64_contents.append(n)
            response = stubs.ModelInfer(request, timeout=PATIENCE)
            assert response.parameters["sequence_id"].string_param == "grpc-1"
            out = {o.name: o for o in response.outputs}
            totals.append(list(out["total"].contents.int64_contents))
        assert totals == [[1], [3], [6]]
        assert response.parameters["sequence_end"].bool_param is True
        with pytest.raises(grpc.RpcError) as caught:  # Triton's rule on OIP: START needed
            stubs.ModelInfer(request, timeout=PATIENCE)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "must specify the START flag" in str(caught.value.details())
        assert "ended by a request" in str(caught.value.details())


def test_torchserve_stream_predictions2_carries_a_sequence(
    server: Server, ts: SimpleNamespace
) -> None:
    with grpc.insecure_channel(target(server)) as channel:
        stub: Any = ts.grpc.InferenceAPIsServiceStub(channel)

        def req(n: int, seq: str | None = None, **extra: bytes) -> Any:
            fields = {"sequence_id": seq} if seq else {}
            inputs = {"data": json.dumps({"add": n}).encode(), **extra}
            return ts.pb2.PredictionsRequest(model_name="running-sum", input=inputs, **fields)

        first = stub.Predictions(req(4), timeout=PATIENCE)  # no id: the server makes one
        seq = first.sequence_id
        assert seq and json.loads(first.prediction)["total"] == 4
        answers = list(
            stub.StreamPredictions2(
                iter([req(1, seq), req(2, seq, **{SEQ + "_end": b"true"}), req(5, seq)]),
                timeout=PATIENCE,
            )
        )
        assert [a.sequence_id for a in answers] == [seq, seq, seq]
        assert [json.loads(a.prediction)["total"] for a in answers[:2]] == [5, 7]
        assert answers[2].status.code == grpc.StatusCode.FAILED_PRECONDITION.value[0]
        assert "ended by a request" in answers[2].status.message


# -- the bundled examples -------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_sequence_examples(examples_server: Server) -> None:
    async with httpx.AsyncClient(base_url=examples_server.url, timeout=PATIENCE) as client:
        # examples/stateful-sum: a TorchServe handler with its own LRU cache; 0 ends a sequence.
        first = await client.post("/predictions/stateful-sum", content=b"3")
        assert first.status_code == 200, first.text
        seq = first.headers[SEQ]
        sums = [first.json()]
        for value in (b"4", b"5", b"0"):
            r = await client.post("/predictions/stateful-sum", content=value, headers={SEQ: seq})
            assert r.status_code == 200, r.text
            sums.append(r.json())
        assert sums == [3, 7, 12, 12] and r.headers[SEQ + "_end"] == "true"
        again = await client.post("/predictions/stateful-sum", content=b"1", headers={SEQ: seq})
        assert again.status_code == 410 and "ended by the model" in again.json()["error"]

        # examples/running-total: a native model with podium.Context.
        url = "/v1/models/running-total:predict"
        r = await client.post(url, json={"value": 3})
        seq = r.headers[SEQ]
        r = await client.post(url, json={"value": 5, "done": True}, headers={SEQ: seq})
        assert r.json() == {"total": 8, "mean": 4.0} and r.headers[SEQ + "_end"] == "true"


async def _stop_a_stream(client: httpx.AsyncClient, url: str, body: Any, cancel: Any) -> str:
    """Start a long stream, stop it with a request on the same sequence; the sequence id."""
    async with client.stream("POST", url, **body) as stream:
        seq = stream.headers[SEQ]
        lines = stream.aiter_lines()
        first = await anext(lines)
        assert first.startswith("item 0")
        answer = await client.post(url, headers={SEQ: seq}, **cancel)
        assert answer.status_code == 200 and "cancelling" in answer.text
        rest = [line async for line in lines if line]
    assert "cancelled" in rest and len(rest) < 40  # it stopped long before 41 items
    return seq


@pytest.mark.anyio
async def test_a_request_on_the_same_sequence_stops_a_running_stream(
    client: httpx.AsyncClient,
) -> None:
    """A native model with continuous batching on its sequences (tests/models/sequences/overlap):
    the cancel request runs while the sequence's stream is still going."""
    url = "/v1/models/overlap:predict"
    seq = await _stop_a_stream(client, url, {"json": {"value": 41}}, {"json": {"value": -1}})
    ended = await client.post(url, json={"value": 0}, headers={SEQ: seq})
    assert ended.text.startswith("ended; total")
    # (a stream's headers leave before it ends, so its end shows on the next request)
    after = await client.post(url, json={"value": 1}, headers={SEQ: seq})
    assert after.status_code == 410 and "ended by the model" in after.json()["error"]


@pytest.mark.anyio
async def test_the_torchserve_stateful_stream_example(examples_server: Server) -> None:
    """examples/stateful-stream: a TorchServe handler with sequenceBatching and
    continuousBatching; -1 stops the stream in progress, 0 ends the sequence."""
    url = "/predictions/stateful-stream"
    async with httpx.AsyncClient(base_url=examples_server.url, timeout=PATIENCE) as client:
        seq = await _stop_a_stream(client, url, {"content": b"41"}, {"content": b"-1"})
        ended = await client.post(url, content=b"0", headers={SEQ: seq})
        assert ended.status_code == 200 and ended.text.startswith("ended; total")
        after = await client.post(url, content=b"1", headers={SEQ: seq})
        assert after.status_code == 410 and "ended by the model" in after.json()["error"]


def test_oip_model_stream_infer_carries_a_sequence(
    server: Server, mlserver: SimpleNamespace
) -> None:
    """One ModelStreamInfer stream, every request naming the same sequence by its parameters
    (MLServer's framing: a bare ModelInferResponse per request)."""
    with grpc.insecure_channel(target(server)) as channel:
        stubs = Stubs(channel, mlserver, stream_output=mlserver.ModelInferResponse)

        def request(n: int) -> Any:
            message = mlserver.ModelInferRequest(model_name="running-sum")
            message.parameters["sequence_id"].string_param = "stream-seq"
            message.parameters["sequence_start"].bool_param = n == 1
            tensor = message.inputs.add(name="add", datatype="INT64", shape=[1])
            tensor.contents.int64_contents.append(n)
            return message

        answers = list(stubs.ModelStreamInfer(iter([request(1), request(2), request(3)])))
        totals = [
            list({o.name: o for o in a.outputs}["total"].contents.int64_contents) for a in answers
        ]
        assert totals == [[1], [3], [6]]  # one sequence's state, in the stream's order
        assert {a.parameters["sequence_id"].string_param for a in answers} == {"stream-seq"}


@pytest.mark.anyio
async def test_absolute_timeout_and_a_full_sequence_queue(client: httpx.AsyncClient) -> None:
    url = "/v1/models/bounded:predict"
    # A full queue: three requests at once on one sequence; whichever order they arrive in, one
    # runs, one waits (max_sequence_queue_size 1) and the last is refused; nothing else is lost.
    answers = await asyncio.gather(
        *(client.post(url, json={"hold": 0.2}, headers={SEQ: "full"}) for _ in range(3))
    )
    assert sorted(a.status_code for a in answers) == [200, 200, 503]
    (refused,) = [a for a in answers if a.status_code == 503]
    assert "max_sequence_queue_size" in refused.json()["error"]
    assert sorted(a.json()["n"] for a in answers if a.status_code == 200) == [1, 2]
    # Older than sequence_timeout_ms (1 s): refused, and it says so.
    first = await client.post(url, json={}, headers={SEQ: "aged"})
    assert first.status_code == 200
    await asyncio.sleep(1.3)
    late = await client.post(url, json={}, headers={SEQ: "aged"})
    assert late.status_code == 410 and "sequence_timeout_ms" in late.json()["error"]


def test_interleaved_sequences_over_torchserve_grpc(server: Server, ts: SimpleNamespace) -> None:
    """Two clients, each with its own sequence on its own StreamPredictions2 stream, at once."""
    with grpc.insecure_channel(target(server)) as channel:
        stub: Any = ts.grpc.InferenceAPIsServiceStub(channel)

        def run(seq: str, values: list[int]) -> list[int]:
            requests = [
                ts.pb2.PredictionsRequest(
                    model_name="running-sum",
                    sequence_id=seq,
                    input={"data": json.dumps({"add": v}).encode()},
                )
                for v in values
            ]
            answers = stub.StreamPredictions2(iter(requests), timeout=PATIENCE)
            return [json.loads(a.prediction)["total"] for a in answers]

        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(2) as pool:
            a = pool.submit(run, "grpc-a", [1, 2, 3, 4])
            b = pool.submit(run, "grpc-b", [10, 20, 30, 40])
            assert a.result() == [1, 3, 6, 10]
            assert b.result() == [10, 30, 60, 100]
