"""Stateful sequences as the real servers' own clients use them, end to end.

Triton's: ``tritonclient`` sends what Triton's published sequence examples send (fixed ids 1000
and 1001 with ``sequence_start`` on the first request and ``sequence_end`` on the last, every run
again; a gRPC stream with each sequence's requests written back to back). TorchServe's: the
``ts_request_sequence_*`` headers and ``StreamPredictions2`` input entries with TorchServe's own
names, and the id header a TorchServe handler sets itself (as TorchServe's stateful examples do).
"""

from __future__ import annotations

import functools
import json
import queue
import uuid
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from conftest import TEST_MODELS, Server, run_server
from e2e_helpers import PATIENCE
from grpc_helpers import target
from tritonclient.utils import InferenceServerException

pytest_plugins = ["e2e_fixtures", "grpc_fixtures"]

SEQ = "ts_request_sequence_id"
VALUES = [11, 7, 5, 3, 2, 0, 1]  # Triton's examples' values


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    # Triton's stream framing, which tritonclient's stream speaks.
    with run_server(TEST_MODELS / "sequences", args=("--grpc-stream-format", "triton")) as running:
        yield running


def running_sums(values: list[int]) -> list[int]:
    return [sum(values[: i + 1]) for i in range(len(values))]


def _collect(got: queue.Queue[tuple[Any, Any]], result: Any, error: Any) -> None:
    got.put((result, error))


def _input(module: Any, value: int) -> Any:
    tensor = module.InferInput("INPUT", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.full((1, 1), value, dtype=np.int32))
    return [tensor]


# -- Triton: ids reused run after run, a start on a live id, START needed -----------------------


def test_triton_sync_clients_reuse_their_fixed_ids_run_after_run(server: Server) -> None:
    """As Triton's simple_http/grpc_sequence_sync_infer_client: ids 1000 and 1001 on every run.
    Before, every run but the first failed (the ended ids were refused for ever)."""
    http = triton_http.InferenceServerClient(server.url.removeprefix("http://"))
    grpc_client = triton_grpc.InferenceServerClient(target(server))
    try:
        for _ in range(3):
            for client, module, sid in (
                (http, triton_http, 1000),
                (grpc_client, triton_grpc, 1001),
            ):
                got = []
                values = [0, *VALUES]
                for n, value in enumerate(values):
                    result = client.infer(
                        "accumulate",
                        _input(module, value),
                        sequence_id=sid,
                        sequence_start=n == 0,
                        sequence_end=n == len(values) - 1,
                    )
                    got.append(int(result.as_numpy("OUTPUT")[0][0]))
                assert got == running_sums(values)  # fresh state each run
    finally:
        http.close()
        grpc_client.close()


def test_triton_start_on_a_live_id_begins_a_new_sequence(server: Server) -> None:
    client = triton_http.InferenceServerClient(server.url.removeprefix("http://"))
    try:

        def send(value: int, **flags: bool) -> int:
            result = client.infer(
                "accumulate", _input(triton_http, value), sequence_id=2000, **flags
            )
            return int(result.as_numpy("OUTPUT")[0][0])

        assert [send(5, sequence_start=True), send(6)] == [5, 11]
        # a client that crashed mid-sequence and starts over with the same id
        assert [send(7, sequence_start=True), send(1)] == [7, 8]
        assert send(1, sequence_end=True) == 9
    finally:
        client.close()


def test_triton_a_request_without_start_for_an_unknown_id_is_refused_as_triton_does(
    server: Server,
) -> None:
    client = triton_grpc.InferenceServerClient(target(server))
    try:
        with pytest.raises(InferenceServerException) as caught:
            client.infer("accumulate", _input(triton_grpc, 1), sequence_id=424242)
        assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert (
            "inference request for sequence '424242' to model 'accumulate' must specify the "
            "START flag on the first request of the sequence"
        ) in caught.value.message()
    finally:
        client.close()
    with httpx.Client(base_url=server.url, timeout=PATIENCE) as http:
        body = {
            "parameters": {"sequence_id": 424243},
            "inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "INT32", "data": [1]}],
        }
        refused = http.post("/v2/models/accumulate/infer", json=body)
        assert refused.status_code == 400 and "must specify the START flag" in refused.text


def test_triton_stream_of_back_to_back_sequences_waits_instead_of_refusing(
    server: Server,
) -> None:
    """Triton's simple_grpc_sequence_stream_infer_client: on one ModelStreamInfer stream, each
    sequence's eight requests written back to back (the model's sequence queue holds one):
    every request is answered, none refused; and a second run with the same ids starts them
    again."""
    sequences: dict[Any, list[int]] = {
        1000: [0, *VALUES],
        1001: [100, *(-v for v in VALUES)],
        str(uuid.uuid4()): [20, *(-v for v in VALUES)],
    }
    for _ in range(2):
        got: queue.Queue[tuple[Any, Any]] = queue.Queue()
        client = triton_grpc.InferenceServerClient(target(server))
        try:
            client.start_stream(callback=functools.partial(_collect, got))
            for sid, values in sequences.items():
                for n, value in enumerate(values):
                    client.async_stream_infer(
                        "accumulate",
                        _input(triton_grpc, value),
                        request_id=f"{sid}_{n}",
                        sequence_id=sid,
                        sequence_start=n == 0,
                        sequence_end=n == len(values) - 1,
                    )
            answers: dict[str, list[int]] = {str(sid): [] for sid in sequences}
            for _ in range(sum(len(v) for v in sequences.values())):
                result, error = got.get(timeout=PATIENCE)
                assert error is None, error
                sid = result.get_response().id.rsplit("_", 1)[0]
                answers[sid].append(int(result.as_numpy("OUTPUT")[0][0]))
        finally:
            client.stop_stream()
            client.close()
        assert answers == {str(sid): running_sums(v) for sid, v in sequences.items()}


# -- TorchServe: the id header once, its flag names, a repeated id -------------------------------


def test_the_id_header_is_sent_once_when_the_handler_sets_it_too(examples_server: Server) -> None:
    """examples/stateful-sum sets ts_request_sequence_id itself, as TorchServe's stateful
    examples do: one header line, so that sending it back continues the sequence."""
    url = "/predictions/stateful-sum"
    plain = {"content-type": "text/plain"}
    with httpx.Client(base_url=examples_server.url, timeout=PATIENCE) as client:
        first = client.post(url, content=b"3", headers=plain)
        assert first.status_code == 200, first.text
        assert len(first.headers.get_list(SEQ)) == 1
        seq = first.headers[SEQ]
        second = client.post(url, content=b"4", headers={**plain, SEQ: first.headers[SEQ]})
        assert second.json() == 7 and second.headers.get_list(SEQ) == [seq]
        # a client that joined two lines ("id, id") and sent that back: the same sequence
        joined = client.post(url, content=b"5", headers={**plain, SEQ: f"{seq}, {seq}"})
        assert joined.status_code == 200 and joined.json() == 12
        # two different ids in one header: refused, never a silent new sequence
        mixed = client.post(url, content=b"5", headers={**plain, SEQ: f"{seq}, other"})
        assert mixed.status_code == 400 and "2 different sequences" in mixed.text
        ended = client.post(url, content=b"0", headers={**plain, SEQ: seq})
        assert ended.status_code == 200 and ended.headers[SEQ + "_end"] == "true"


def test_torchserve_flag_names_end_and_start_sequences_over_http(server: Server) -> None:
    url = "/predictions/running-sum"
    with httpx.Client(base_url=server.url, timeout=PATIENCE) as client:
        first = client.post(url, json={"add": 2})
        seq = first.headers[SEQ]
        end = client.post(
            url, json={"add": 3}, headers={SEQ: seq, "ts_request_sequence_end": "true"}
        )
        assert end.json()["total"] == 5 and end.headers[SEQ + "_end"] == "true"
        closed = client.post(url, json={"add": 1}, headers={SEQ: seq})
        assert closed.status_code == 410  # TorchServe routes: a closed id is not reopened silently
        assert "send the start flag" in closed.json()["error"]
        again = client.post(
            url, json={"add": 10}, headers={SEQ: seq, "ts_request_sequence_start": "true"}
        )
        assert again.status_code == 200 and again.json() == {
            "total": 10,
            "first": True,
            "sequence": seq,
        }


def test_torchserve_grpc_end_entry_with_torchserve_s_name_ends_the_sequence(
    server: Server, ts: SimpleNamespace
) -> None:
    """StreamPredictions2 with TorchServe's own input entry ``ts_request_sequence_end`` (it was
    ignored) and ``ts_request_sequence_start`` to begin the id again."""
    with grpc.insecure_channel(target(server)) as channel:
        stub: Any = ts.grpc.InferenceAPIsServiceStub(channel)

        def req(n: int, **flags: bytes) -> Any:
            inputs = {"data": json.dumps({"add": n}).encode(), **flags}
            return ts.pb2.PredictionsRequest(
                model_name="running-sum", sequence_id="ts-g", input=inputs
            )

        answers = list(
            stub.StreamPredictions2(
                iter(
                    [
                        req(1),
                        req(2, ts_request_sequence_end=b"true"),
                        req(5),
                        req(7, ts_request_sequence_start=b"true"),
                        req(1),
                    ]
                ),
                timeout=PATIENCE,
            )
        )
        totals = [json.loads(a.prediction)["total"] if a.prediction else None for a in answers]
        assert totals == [1, 3, None, 7, 8]
        assert answers[2].status.code == grpc.StatusCode.FAILED_PRECONDITION.value[0]
        assert "ended by a request" in answers[2].status.message


# -- capacity defaults -----------------------------------------------------------------------------


def test_anonymous_calls_do_not_lock_new_sequences_out(examples_server: Server) -> None:
    """examples/running-total with the default max_num_sequences: a handful of curl calls that
    never send the id back used to lock every new sequence out for the idle time."""
    url = "/v1/models/running-total:predict"
    with httpx.Client(base_url=examples_server.url, timeout=PATIENCE) as client:
        for _ in range(12):
            assert client.post(url, json={"value": 1}).status_code == 200
        first = client.post(url, json={"value": 3})
        assert first.status_code == 200, first.text
        seq = first.headers[SEQ]
        done = client.post(url, json={"value": 5, "done": True}, headers={SEQ: seq})
        assert done.json() == {"total": 8, "mean": 4.0}
