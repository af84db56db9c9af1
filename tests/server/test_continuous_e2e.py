"""Continuous batching end to end: a real ``podium serve`` with a step model (in thread workers
and in a worker process), streamed to httpx clients over the Truss route (chunked) and OIP
generate_stream (SSE). Requests join the running batch between steps, leave when done or when
their client goes; judged by the model's record of each step's batch and by the order things
happened."""

from __future__ import annotations

import asyncio
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from conftest import TEST_MODELS, Server, run_server
from e2e_helpers import PATIENCE, EventLog

pytest_plugins = ["e2e_fixtures"]

URL = "/v1/models/steps:predict"


@pytest.fixture(scope="module")
def steps_events(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("continuous") / "events.jsonl"


@pytest.fixture(scope="module", params=["thread", "process"])
def server(
    steps_events: Path, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """The step model in thread workers, and in a worker process (``workers: process``)."""
    models = TEST_MODELS / "continuous"
    if request.param == "process":
        models = tmp_path_factory.mktemp("continuous-process")
        shutil.copytree(TEST_MODELS / "continuous" / "steps", models / "steps")
        with (models / "steps" / "config.yaml").open("a") as config:
            config.write("workers: process\n")
    with run_server(models, env={"PODIUM_E2E_EVENTS": str(steps_events)}) as running:
        yield running


@pytest.fixture
async def client(server: Server) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, timeout=PATIENCE) as c:
        yield c


def batches(events: Path) -> list[list[str]]:
    return [e["batch"] for e in EventLog(events).of("steps")]


@pytest.mark.anyio
async def test_a_request_joins_the_running_batch_and_finishes_first(
    client: httpx.AsyncClient, steps_events: Path
) -> None:
    long, short = f"long-{uuid.uuid4().hex[:6]}", f"short-{uuid.uuid4().hex[:6]}"
    finished: list[str] = []

    async def run(tag: str, n: int, started: asyncio.Event | None = None) -> list[str]:
        items = []
        async with client.stream("POST", URL, json={"tag": tag, "n": n}) as r:
            assert r.status_code == 200
            async for line in r.aiter_lines():
                if line.strip():
                    items.append(line.strip().strip('"'))
                    if started is not None:
                        started.set()
        finished.append(tag)
        return items

    started = asyncio.Event()
    long_task = asyncio.create_task(run(long, 12, started))
    await started.wait()  # the long request is running: the short one joins it mid-run
    short_items = await run(short, 2)
    long_items = await long_task
    assert short_items == [f"{short}:1", f"{short}:2"]
    assert long_items == [f"{long}:{i}" for i in range(1, 13)]
    assert finished == [short, long]  # static batching would have made it wait for the long one
    steps = [b for b in batches(steps_events) if long in b or short in b]
    joined = [i for i, b in enumerate(steps) if short in b]
    assert len(joined) == 2 and all(long in steps[i] for i in joined)  # in the same steps
    assert steps[0] == [long]  # it was not there from the start: it joined between steps


@pytest.mark.anyio
async def test_a_client_that_leaves_leaves_the_batch(
    client: httpx.AsyncClient, steps_events: Path
) -> None:
    gone, stays = f"gone-{uuid.uuid4().hex[:6]}", f"stays-{uuid.uuid4().hex[:6]}"
    stay_task = asyncio.create_task(client.post(URL, json={"tag": stays, "n": 15}))
    async with client.stream("POST", URL, json={"tag": gone, "n": 1000}) as r:
        async for line in r.aiter_lines():
            if line.strip():
                break  # one item, then the client goes
    response = await stay_task
    assert response.status_code == 200
    assert response.text.count(stays) == 15  # the other request did not notice
    steps = [b for b in batches(steps_events) if gone in b]
    assert 1 <= len(steps) < 1000 and len(steps) < 15 + 5  # it left soon after its client did


@pytest.mark.anyio
async def test_generate_stream_over_sse(client: httpx.AsyncClient) -> None:
    tag = f"sse-{uuid.uuid4().hex[:6]}"
    body = {
        "inputs": [
            {"name": "tag", "shape": [1], "datatype": "BYTES", "data": [tag],
             "parameters": {"content_type": "str"}},
            {"name": "n", "shape": [1], "datatype": "INT64", "data": [3]},
        ]
    }  # fmt: skip
    r = await client.post("/v2/models/steps/infer_stream", json=body)
    assert r.status_code == 200, r.text
    assert r.text.count("data: ") == 3


@pytest.mark.anyio
async def test_the_continuous_example(examples_server: Server) -> None:
    async with httpx.AsyncClient(base_url=examples_server.url, timeout=PATIENCE) as c:
        answers = await asyncio.gather(
            *(c.post("/v1/models/continuous-words:predict", json={"n": n}) for n in (3, 5))
        )
    assert [a.text for a in answers] == ["the quick brown ", "the quick brown fox jumps "]


HEADER_MODEL = """
from starlette.requests import Request


class Model:
    async def preprocess(self, inputs, request: Request):
        return {**inputs, "who": request.headers.get("x-who", "?")}

    async def step(self, batch):
        for g in batch:
            g.emit(f"{g.inputs['who']}:{g.inputs['n']}")
            g.finish()
"""


@pytest.mark.anyio
async def test_a_worker_process_preprocess_gets_the_request(tmp_path: Path) -> None:
    """The request object crosses to the worker process with its request (a snapshot, rebuilt
    there) for the preprocess that asks for it."""
    folder = tmp_path / "who"
    folder.mkdir()
    (folder / "model.py").write_text(HEADER_MODEL)
    (folder / "config.yaml").write_text("continuous_batching: true\nworkers: process\n")
    with run_server(folder) as running:
        async with httpx.AsyncClient(base_url=running.url, timeout=PATIENCE) as c:
            r = await c.post("/v1/models/who:predict", json={"n": 1}, headers={"x-who": "ann"})
            assert r.status_code == 200, r.text
            assert "ann:1" in r.text
