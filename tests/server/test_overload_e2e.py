"""Overload end to end (docs/scaling.md, "Overload"): a request past its queue deadline is
refused with 503 / UNAVAILABLE and Retry-After without reaching the model, and waiters are
served by priority level. Judged by what the model ran (it records every input it starts) and
what the clients got, never by how fast.

A request with ``x`` < 0 holds the model's only slot until the test creates the file
``gate-{-x}``; every other answers at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from conftest import Server, run_server
from grpc_helpers import Stubs, infer_request, podium_messages, target

MODEL = """
import os, time
import numpy as np

class Model:
    def predict(self, inputs):
        x = int(np.asarray(inputs["x"]).ravel()[0])
        folder = os.environ["OVERLOAD_DIR"]
        with open(os.path.join(folder, "ran"), "a") as f:
            f.write(f"{x}\\n")
        gate = os.path.join(folder, f"gate{-x}")
        end = time.monotonic() + 30
        while x < 0 and not os.path.exists(gate) and time.monotonic() < end:
            time.sleep(0.005)
        return {"y": np.asarray([x], dtype=np.int64)}
"""

CONFIGS = {
    # three levels, the default in the middle; no deadline of its own
    "ranked": "priority_levels: 3\ndefault_priority: 2\n",
    # a request waits at most 200 ms
    "bounded": "max_queue_delay: 200\n",
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("overload")
    for name, config in CONFIGS.items():
        (root / "models" / name).mkdir(parents=True)
        (root / "models" / name / "model.py").write_text(MODEL)
        (root / "models" / name / "config.yaml").write_text(config)
    return root


@pytest.fixture(scope="module")
def server(folder: Path) -> Iterator[Server]:
    with run_server(folder / "models", env={"OVERLOAD_DIR": str(folder)}) as running:
        yield running


def ran(folder: Path) -> list[int]:
    path = folder / "ran"
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def body(x: int, **parameters: Any) -> dict[str, Any]:
    request: dict[str, Any] = {
        "inputs": [{"name": "x", "datatype": "INT64", "shape": [1], "data": [x]}]
    }
    if parameters:
        request["parameters"] = parameters
    return request


async def until(predicate: Any, what: str) -> None:
    """Wait (at most 10 s) until ``predicate()`` holds: the order of events, not a speed."""
    end = time.monotonic() + 10
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"never happened: {what}")
        await asyncio.sleep(0.01)


async def queued(client: httpx.AsyncClient, server: Server, model: str, count: int) -> None:
    """Wait (at most 10 s) until ``count`` requests wait in ``model``'s queue, as the metrics
    listener's ``podium_requests_queued`` says: a request sent is in line only once the server
    has read and queued it, which on a busy machine takes its time."""
    metrics = server.addresses["http-metrics"] + "/metrics"
    line = re.compile(rf'^podium_requests_queued\{{model="{model}",[^}}]*\}} {count}\.0$', re.M)
    end = time.monotonic() + 10
    while not line.search((await client.get(metrics)).text):
        if time.monotonic() > end:
            raise AssertionError(f"{model}'s queue never held {count} request(s)")
        await asyncio.sleep(0.01)


async def holding(
    client: httpx.AsyncClient, folder: Path, model: str, gate: int
) -> asyncio.Task[httpx.Response]:
    """A request that holds ``model``'s slot until gate ``gate`` opens, once it runs."""
    task = asyncio.create_task(client.post(f"/v2/models/{model}/infer", json=body(-gate)))
    await until(lambda: -gate in ran(folder), f"request {-gate} runs")
    return task


@pytest.mark.anyio
async def test_rest_past_max_queue_delay_is_503_with_retry_after_and_never_runs(
    server: Server, folder: Path
) -> None:
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        held = await holding(client, folder, "bounded", 1)
        late = await client.post("/v2/models/bounded/infer", json=body(101))
        assert late.status_code == 503, late.text
        assert late.headers["retry-after"] == "1"
        assert "in its queue, past its deadline, and was not run" in late.json()["error"]
        (folder / "gate1").touch()
        assert (await held).status_code == 200
        after = await client.post("/v2/models/bounded/infer", json=body(102))
        assert after.status_code == 200  # the line is free again
    assert 101 not in ran(folder) and 102 in ran(folder)


@pytest.mark.anyio
async def test_truss_and_torchserve_routes_refuse_with_retry_after_too(
    server: Server, folder: Path
) -> None:
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        held = await holding(client, folder, "bounded", 7)
        truss = await client.post("/v1/models/bounded:predict", json={"x": [701]})
        torchserve = await client.post("/predictions/bounded", json={"x": [702]})
        for refused in (truss, torchserve):
            assert refused.status_code == 503, refused.text
            assert refused.headers["retry-after"] == "1"
        assert "past its deadline" in truss.json()["error"]
        assert "past its deadline" in torchserve.json()["message"]
        (folder / "gate7").touch()
        assert (await held).status_code == 200
    assert 701 not in ran(folder) and 702 not in ran(folder)


@pytest.mark.anyio
async def test_rest_timeout_header_and_oip_parameter_bound_the_wait(
    server: Server, folder: Path
) -> None:
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        held = await holding(client, folder, "ranked", 2)
        by_header = await client.post(
            "/v2/models/ranked/infer", json=body(201), headers={"x-podium-timeout-ms": "50"}
        )
        by_parameter = await client.post(
            "/v2/models/ranked/infer",
            json=body(202, timeout=50_000),  # microseconds
        )
        for refused in (by_header, by_parameter):
            assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
        (folder / "gate2").touch()
        assert (await held).status_code == 200
    assert 201 not in ran(folder) and 202 not in ran(folder)


@pytest.mark.anyio
async def test_rest_bad_priority_or_timeout_is_400_naming_the_rule(server: Server) -> None:
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        cases = [
            ({"x-podium-timeout-ms": "zzsoon"}, body(1), "'x-podium-timeout-ms' must be a number"),
            ({"x-podium-timeout-ms": "-5"}, body(1), "'x-podium-timeout-ms' must be a number"),
            ({"x-podium-priority": "zzhigh"}, body(1), "'x-podium-priority' must be an integer"),
            ({"x-podium-priority": "4"}, body(1), "priority levels 1-3"),
            ({}, body(1, priority=9), "priority levels 1-3"),
            ({}, body(1, timeout="1s"), "parameter 'timeout' must be an integer"),
        ]
        for headers, request, message in cases:
            answer = await client.post("/v2/models/ranked/infer", json=request, headers=headers)
            assert answer.status_code == 400, (headers, answer.text)
            assert message in answer.json()["error"]
            assert "zz" not in answer.text  # never echoed


@pytest.mark.anyio
async def test_rest_higher_levels_are_served_first(server: Server, folder: Path) -> None:
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        held = await holding(client, folder, "ranked", 3)
        waiting = []
        # arrival order: low (3), default (2), high by header (1), high by parameter (1)
        for n, (x, headers, parameters) in enumerate(
            (
                (301, {"x-podium-priority": "3"}, {}),
                (302, {}, {}),
                (303, {"x-podium-priority": "1"}, {}),
                (304, {}, {"priority": 1}),
            ),
            start=1,
        ):
            waiting.append(
                asyncio.create_task(
                    client.post(
                        "/v2/models/ranked/infer", json=body(x, **parameters), headers=headers
                    )
                )
            )
            await queued(client, server, "ranked", n)  # in line in this order
        (folder / "gate3").touch()
        assert (await held).status_code == 200
        assert [(await task).status_code for task in waiting] == [200] * 4
    order = [x for x in ran(folder) if 300 < x < 400]
    assert order == [303, 304, 302, 301]


@contextlib.asynccontextmanager
async def clients(server: Server) -> AsyncIterator[tuple[httpx.AsyncClient, Stubs]]:
    """An HTTP client (to hold the model's slot) and gRPC stubs, both to ``server``."""
    async with (
        httpx.AsyncClient(base_url=server.url, timeout=30) as client,
        grpc.aio.insecure_channel(target(server)) as channel,
    ):
        yield client, Stubs(channel, podium_messages())


@pytest.mark.anyio
async def test_grpc_refusal_is_unavailable_with_retry_after_and_metadata_sets_priority(
    server: Server, folder: Path
) -> None:
    messages = podium_messages()
    async with clients(server) as (client, stubs):
        held = await holding(client, folder, "bounded", 4)
        call = stubs.ModelInfer(infer_request(messages, "bounded", x=401), timeout=20)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await call
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        trailing = dict(refused.value.trailing_metadata() or ())
        assert trailing["retry-after"] == "1" and "x-request-id" in trailing
        (folder / "gate4").touch()
        await held

        held = await holding(client, folder, "ranked", 5)
        low = stubs.ModelInfer(
            infer_request(messages, "ranked", x=501), metadata=(("x-podium-priority", "3"),)
        )
        await queued(client, server, "ranked", 1)
        high = stubs.ModelInfer(
            infer_request(messages, "ranked", x=502), metadata=(("x-podium-priority", "1"),)
        )
        await queued(client, server, "ranked", 2)
        (folder / "gate5").touch()
        await held
        await low
        await high
        bad = stubs.ModelInfer(
            infer_request(messages, "ranked", x=503), metadata=(("x-podium-priority", "x"),)
        )
        with pytest.raises(grpc.aio.AioRpcError) as invalid:
            await bad
        assert invalid.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert 401 not in ran(folder) and 503 not in ran(folder)
    assert [x for x in ran(folder) if 500 < x < 600] == [502, 501]


@pytest.mark.anyio
async def test_grpc_deadline_bounds_the_queue_wait(server: Server, folder: Path) -> None:
    messages = podium_messages()
    async with clients(server) as (client, stubs):
        held = await holding(client, folder, "ranked", 6)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stubs.ModelInfer(infer_request(messages, "ranked", x=601), timeout=0.2)
        assert refused.value.code() in (
            grpc.StatusCode.DEADLINE_EXCEEDED,  # the client's own clock may end it first
            grpc.StatusCode.UNAVAILABLE,
        )
        await asyncio.sleep(0.3)
        (folder / "gate6").touch()
        await held
        assert (await stubs.ModelInfer(infer_request(messages, "ranked", x=602))) is not None
    # the request whose deadline passed in the queue never reached the model
    assert 601 not in ran(folder) and 602 in ran(folder)
