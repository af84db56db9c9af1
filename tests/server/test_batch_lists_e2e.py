"""A batched ``predict`` annotated ``list[X]``, end to end on a real server: each element is what
``X`` asks for (the OIP request itself, a validated pydantic model), in a thread worker and in a
worker process alike, and in a truss batched by its podium.yaml; without batching, ``list[X]``
still gets the body as it came.

The batched models close a batch only when it holds 3 requests, so 3 concurrent requests are
one batch, and each answer says the size of the batch it was in."""

from __future__ import annotations

import json
from collections.abc import Iterator

import anyio
import httpx
import pytest
from conftest import TEST_MODELS, Server, run_server
from e2e_helpers import PATIENCE, outputs_by_name, tensor


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with run_server(TEST_MODELS / "batch-lists") as running:
        yield running


async def post_all(url: str, calls: list[tuple[str, object]]) -> list[httpx.Response]:
    """POST every (path, json body) at once; the responses in the same order."""
    answers: list[httpx.Response | None] = [None] * len(calls)
    async with httpx.AsyncClient(base_url=url, timeout=PATIENCE) as client:

        async def one(i: int, path: str, body: object) -> None:
            answers[i] = await client.post(path, json=body)

        async with anyio.create_task_group() as tg:
            for i, (path, body) in enumerate(calls):
                tg.start_soon(one, i, path, body)
    assert all(a is not None for a in answers)
    return [a for a in answers if a is not None]


@pytest.mark.anyio
async def test_batched_list_of_inference_requests(server: Server) -> None:
    calls: list[tuple[str, object]] = [
        (
            "/v2/models/requests/infer",
            {"id": f"r{i}", "inputs": [tensor(f"in{i}", "INT64", [1], [i])]},
        )
        for i in range(3)
    ]
    answers = await post_all(server.url, calls)
    assert [a.status_code for a in answers] == [200] * 3, [a.text for a in answers]
    for i, answer in enumerate(answers):
        seen = json.loads(outputs_by_name(answer.json())["info"]["data"][0])
        # the request itself, each answered from its own: not a dict of decoded arrays
        assert seen == {"type": "InferenceRequest", "id": f"r{i}", "input": f"in{i}", "batch": 3}


@pytest.mark.anyio
@pytest.mark.parametrize("model", ["orders", "orders-proc", "truss-orders"])
async def test_batched_list_of_pydantic_models(server: Server, model: str) -> None:
    calls: list[tuple[str, object]] = [
        (f"/v1/models/{model}:predict", {"item": f"item-{i}", "qty": i}) for i in range(3)
    ]
    answers = await post_all(server.url, calls)
    assert [a.status_code for a in answers] == [200] * 3, [a.text for a in answers]
    assert [a.json() for a in answers] == [
        {"type": "Order", "item": f"item-{i}", "double": 2 * i, "batch": 3} for i in range(3)
    ]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("model", "good", "seen"), [("orders", 3, 3), ("orders-proc", 2, 2), ("truss-orders", 3, 3)]
)
async def test_batched_list_of_pydantic_models_validates_each(
    server: Server, model: str, good: int, seen: int
) -> None:
    # The invalid request is refused, naming what is wrong, and never reaches predict. A thread
    # worker validates before the request joins a batch (3 valid ones fill it); a worker
    # process validates its batch's requests itself (the server cannot import the model's
    # class), so the invalid one holds a place in the batch and predict sees the other two.
    calls: list[tuple[str, object]] = [
        (f"/v1/models/{model}:predict", {"item": "x", "qty": "many"}),
        *[(f"/v1/models/{model}:predict", {"item": f"item-{i}", "qty": i}) for i in range(good)],
    ]
    bad, *answers = await post_all(server.url, calls)
    assert bad.status_code == 400
    assert "qty" in bad.text
    assert [a.json() for a in answers] == [
        {"type": "Order", "item": f"item-{i}", "double": 2 * i, "batch": seen} for i in range(good)
    ]


@pytest.mark.anyio
async def test_unbatched_list_annotation_gets_the_body_as_it_came(server: Server) -> None:
    body = [{"item": "a", "qty": 1}, {"item": "b", "qty": "not checked"}]
    (answer,) = await post_all(server.url, [("/v1/models/unbatched:predict", body)])
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"type": "list", "items": ["dict", "dict"]}
