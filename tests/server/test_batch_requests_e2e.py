"""A batched ``predict`` whose request parameter is annotated as the list of requests it gets
(``list[Request]``, ``typing.List[Request]``, ``Sequence[Request]``), end to end on a real
server: each request's own header and body reach its place in the list, in a thread worker, in a
worker process, in a stateful sequence model's batches, in a predict that takes only the
requests, and in a truss batched by its podium.yaml.

The same for a stateful sequence model's Contexts (``list[Context]``): each request of a batch
of two sequences gets its own sequence's state.

The models close a batch only when it is full (3 requests; 2 for contexts-seq), so that many
concurrent requests are one batch, and each answer says the size of the batch it was in."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest
from conftest import TEST_MODELS, Server, run_server
from e2e_helpers import PATIENCE


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with run_server(TEST_MODELS / "batch-requests") as running:
        yield running


async def post_tagged(url: str, model: str, count: int) -> list[httpx.Response]:
    """POST ``count`` requests to ``model`` at once, each with its own x-tag header and body;
    the responses in the same order."""
    answers: list[httpx.Response | None] = [None] * count
    async with httpx.AsyncClient(base_url=url, timeout=PATIENCE) as client:

        async def one(i: int) -> None:
            answers[i] = await client.post(
                f"/v1/models/{model}:predict", json={"n": i}, headers={"x-tag": f"tag-{i}"}
            )

        async with anyio.create_task_group() as tg:
            for i in range(count):
                tg.start_soon(one, i)
    assert all(a is not None for a in answers)
    return [a for a in answers if a is not None]


@pytest.mark.anyio
@pytest.mark.parametrize("model", ["tagged", "tagged-proc", "tagged-seq"])
async def test_batched_predict_gets_the_list_of_requests(server: Server, model: str) -> None:
    answers = await post_tagged(server.url, model, 3)
    assert [a.status_code for a in answers] == [200] * 3, [a.text for a in answers]
    assert [a.json() for a in answers] == [
        {"tag": f"tag-{i}", "n": i, "requests": "list", "batch": 3} for i in range(3)
    ]


@pytest.mark.anyio
async def test_batched_request_only_predict_gets_the_list(server: Server) -> None:
    answers = await post_tagged(server.url, "only", 3)
    assert [a.status_code for a in answers] == [200] * 3, [a.text for a in answers]
    assert [a.json() for a in answers] == [{"tag": f"tag-{i}", "batch": 3} for i in range(3)]


@pytest.mark.anyio
async def test_batched_truss_predict_gets_the_list_of_requests(server: Server) -> None:
    answers = await post_tagged(server.url, "truss-tagged", 3)
    assert [a.status_code for a in answers] == [200] * 3, [a.text for a in answers]
    assert [a.json() for a in answers] == [
        {"tag": f"tag-{i}", "n": i, "batch": 3} for i in range(3)
    ]


@pytest.mark.anyio
async def test_sequence_batch_predict_gets_the_list_of_contexts(server: Server) -> None:
    # two sequences send one request each per round, at once: each round is one batch of 2
    async with httpx.AsyncClient(base_url=server.url, timeout=PATIENCE) as client:

        async def add(seq: str, n: int) -> Any:
            r = await client.post(
                "/v1/models/contexts-seq:predict",
                json={"add": n},
                headers={"ts_request_sequence_id": seq},
            )
            assert r.status_code == 200, r.text
            return r.json()

        rounds = [await asyncio.gather(add("ctx-a", k), add("ctx-b", 10 * k)) for k in (1, 2, 3)]
    totals = {1: (1, 10), 2: (3, 30), 3: (6, 60)}
    assert rounds == [
        [
            {"sequence": "ctx-a", "total": totals[k][0], "first": k == 1, "batch": 2},
            {"sequence": "ctx-b", "total": totals[k][1], "first": k == 1, "batch": 2},
        ]
        for k in (1, 2, 3)
    ]
