"""Process workers end to end, against a real ``podium serve``: right answers from several worker
processes, a faithful request object in the worker, a worker killed with SIGKILL mid-request,
response_timeout, and no process left behind. Judged by answers and the models' event logs."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest
from conftest import TEST_MODELS, Server, run_server
from e2e_helpers import PATIENCE, EventLog, Gates, RawHttp
from helpers import wait_until

pytest_plugins = ["e2e_fixtures"]

WORKER_MODELS = TEST_MODELS / "workers"


def worker_pids(server_pid: int) -> set[int]:
    """The live worker processes whose parent is ``server_pid`` (read from /proc)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        state, ppid = fields[0], int(fields[1])
        if ppid == server_pid and state != "Z" and b"podium.runtime.process" in cmdline:
            found.add(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.fixture(scope="module")
def workers_server(events_path: Path) -> Iterator[Server]:
    with run_server(WORKER_MODELS, env={"PODIUM_E2E_EVENTS": str(events_path)}) as server:
        yield server


@pytest.fixture
async def wclient(workers_server: Server) -> httpx.AsyncClient:
    async with httpx.AsyncClient(base_url=workers_server.url, timeout=PATIENCE) as c:
        yield c  # type: ignore[misc]


@pytest.mark.anyio
async def test_process_workers_answer_from_several_processes(
    workers_server: Server, wclient: httpx.AsyncClient
) -> None:
    server_pid = workers_server.proc.pid
    pids = set()
    for i in range(8):
        # concurrent pairs: the least-loaded worker takes the second request of each pair
        a, b = await _both(
            wclient.post("/v1/models/echo-proc:predict", json={"i": i}),
            wclient.post(
                "/v2/models/echo-proc/infer",
                json={"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [i, 2]}]},
            ),
        )
        assert a.status_code == 200 and b.status_code == 200, (a.text, b.text)
        assert a.json()["i"] == i
        outputs = {o["name"]: o for o in b.json()["outputs"]}
        assert outputs["x"]["data"] == [i, 2] and outputs["x"]["datatype"] == "FP32"
        pids.update((a.json()["pid"], outputs["pid"]["data"][0]))
    assert pids <= worker_pids(server_pid)
    assert server_pid not in pids
    assert len(worker_pids(server_pid)) >= 2 + 1 + 1 + 1  # echo-proc runs 2, the others 1 each


async def _both(a, b):  # type: ignore[no-untyped-def]
    results: list[httpx.Response] = [None, None]  # type: ignore[list-item]

    async def run(i: int, coro) -> None:  # type: ignore[no-untyped-def]
        results[i] = await coro

    async with anyio.create_task_group() as tg:
        tg.start_soon(run, 0, a)
        tg.start_soon(run, 1, b)
    return results


@pytest.mark.anyio
async def test_the_worker_gets_a_faithful_request(
    workers_server: Server, wclient: httpx.AsyncClient
) -> None:
    r = await wclient.post(
        "/v1/models/probe-proc:predict?alpha=1&beta=two",
        content=b'{"hello": "world"}',
        headers={"content-type": "application/json", "x-trace": "abc"},
    )
    assert r.status_code == 200, r.text
    seen = r.json()
    assert seen["pid"] != workers_server.proc.pid
    assert seen["type"] == "Request"
    assert seen["method"] == "POST"
    assert seen["path"] == "/v1/models/probe-proc:predict"
    assert seen["url"].endswith("/v1/models/probe-proc:predict?alpha=1&beta=two")
    assert seen["query"] == {"alpha": "1", "beta": "two"}
    assert seen["headers"] == {"x-trace": "abc"}
    assert seen["content_type"] == "application/json"
    assert json.loads(seen["body"]) == {"hello": "world"}
    assert seen["client"] is True


@pytest.mark.anyio
async def test_is_disconnected_turns_true_in_the_worker_when_the_client_leaves(
    workers_server: Server, events: EventLog, tag: str
) -> None:
    raw = await RawHttp.connect(workers_server.url)
    try:
        await raw.send(
            "POST",
            "/v1/models/probe-proc:predict",
            json.dumps({"watch": tag}).encode(),
            {"content-type": "application/json"},
        )
        (watching,) = await events.wait_for(tag, "watching")
        assert watching["pid"] != workers_server.proc.pid
        assert watching["disconnected"] is False
    finally:
        await raw.close()
    (cancelled,) = await events.wait_for(tag, "cancelled")
    assert cancelled["disconnected"] is True
    assert "never noticed" not in events.names(tag)


@pytest.mark.anyio
async def test_a_worker_killed_mid_request_fails_it_clearly_and_is_replaced(
    workers_server: Server, wclient: httpx.AsyncClient, events: EventLog, gates: Gates, tag: str
) -> None:
    server_pid = workers_server.proc.pid
    before = worker_pids(server_pid)
    gate = gates.new()
    async with anyio.create_task_group() as tg:
        answer: list[httpx.Response] = []

        async def call() -> None:
            answer.append(
                await wclient.post("/v1/models/crash-proc:predict", json={"tag": tag, "gate": gate})
            )

        tg.start_soon(call)
        (started,) = await events.wait_for(tag, "started")
        victim = started["pid"]
        os.kill(victim, signal.SIGKILL)
    (r,) = answer
    assert r.status_code == 500
    message = r.json()["error"]
    assert f"worker process {victim} died" in message
    assert "SIGKILL" in message and "crash-proc" in message
    # the next request succeeds, on a new worker process
    again = await wclient.post("/v1/models/crash-proc:predict", json={"tag": tag + "-2"})
    assert again.status_code == 200, again.text
    assert again.json()["pid"] != victim
    # the worker count recovers
    recovered = "worker count recovered"
    await wait_until(
        lambda: len(worker_pids(server_pid)) == len(before), PATIENCE, every=0.02, what=recovered
    )
    assert victim not in worker_pids(server_pid)


@pytest.mark.anyio
async def test_response_timeout_is_504_and_the_worker_is_recycled(
    workers_server: Server, wclient: httpx.AsyncClient
) -> None:
    first = await wclient.post("/v1/models/slow-proc:predict", json={"sleep": 0})
    assert first.status_code == 200
    old = first.json()["pid"]
    r = await wclient.post("/v1/models/slow-proc:predict", json={"sleep": 30})
    assert r.status_code == 504, r.text
    assert "response_timeout" in r.json()["error"]
    gone = "the timed-out worker process is gone"
    await wait_until(lambda: not alive(old), PATIENCE, every=0.02, what=gone)
    again = await wclient.post("/v1/models/slow-proc:predict", json={"sleep": 0})
    assert again.status_code == 200, again.text
    assert again.json()["pid"] != old


def test_response_timeout_over_grpc_is_deadline_exceeded(workers_server: Server) -> None:
    import numpy as np
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    client = grpcclient.InferenceServerClient(workers_server.addresses["grpc-inference"])
    try:
        sleep = grpcclient.InferInput("sleep", [1], "FP64")
        sleep.set_data_from_numpy(np.array([30.0]))
        with pytest.raises(InferenceServerException) as caught:
            client.infer("slow-proc", [sleep])
        assert caught.value.status() == "StatusCode.DEADLINE_EXCEEDED"
        assert "response_timeout" in caught.value.message()
    finally:
        client.close()


def test_no_worker_process_outlives_the_server(events_path: Path) -> None:
    with run_server(WORKER_MODELS / "echo-proc") as server:
        pids = worker_pids(server.proc.pid)
        assert len(pids) == 2
    for pid in pids:
        assert not alive(pid), f"worker process {pid} outlived the server"


@pytest.mark.anyio
async def test_the_cpu_heavy_example_runs_in_two_worker_processes(examples_server: Server) -> None:
    async with httpx.AsyncClient(base_url=examples_server.url, timeout=PATIENCE) as c:
        answers = [
            (await c.post("/v1/models/cpu-heavy:predict", json={"seed": 7, "rounds": 100})).json()
            for _ in range(2)
        ]
    assert answers[0]["digest"] == answers[1]["digest"]  # deterministic work
    assert answers[0]["pid"] in worker_pids(examples_server.proc.pid)
    assert len(worker_pids(examples_server.proc.pid)) >= 2
