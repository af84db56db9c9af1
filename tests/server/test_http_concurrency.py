"""predict_concurrency and dynamic batching end to end, judged by the events the models recorded."""

from __future__ import annotations

import anyio
import httpx
import pytest
from conftest import Server
from e2e_helpers import EventLog, Gates, outputs_by_name, tensor

pytest_plugins = ["e2e_fixtures"]


async def gather_posts(client: httpx.AsyncClient, calls: list[tuple[str, dict, dict]]) -> list:
    """POST every (path, json, headers) at once; the responses in the same order."""
    answers: list[httpx.Response | None] = [None] * len(calls)

    async def one(i: int, path: str, body: dict, headers: dict) -> None:
        answers[i] = await client.post(path, json=body, headers=headers)

    async with anyio.create_task_group() as tg:
        for i, (path, body, headers) in enumerate(calls):
            tg.start_soon(one, i, path, body, headers)
    return answers


@pytest.mark.anyio
async def test_preprocess_runs_outside_predict_concurrency(
    client: httpx.AsyncClient, events: EventLog, tag: str
) -> None:
    # overlap: predict_concurrency 5, a sync preprocess that only returns once all ten requests
    # are inside preprocess at once (a barrier of 10), and a predict that waits for five at once.
    n = 10
    calls = [("/v1/models/overlap:predict", {"tag": tag, "i": i, "n": n}, {}) for i in range(n)]
    answers = await gather_posts(client, calls)
    assert [a.status_code for a in answers] == [200] * n, [a.text for a in answers]
    assert [a.json() for a in answers] == [{"i": i} for i in range(n)]

    log = events.of(tag)
    names = [e["event"] for e in log]
    # All ten preprocesses were running together: every start comes before the first end.
    assert names.index("pre-end") > max(i for i, name in enumerate(names) if name == "pre-start")
    assert names.count("pre-start") == names.count("pre-end") == n

    running, most = 0, 0
    for name in names:
        if name == "predict-start":
            running += 1
            most = max(most, running)
        elif name == "predict-end":
            running -= 1
    assert most == 5  # never more than predict_concurrency, and all five slots used

    starts = [i for i, name in enumerate(names) if name == "predict-start"]
    first_end = names.index("predict-end")
    # The sixth predict waited for a slot: it started only after a predict had finished.
    assert starts[5] > first_end
    assert all(s < first_end for s in starts[:5])


@pytest.mark.anyio
async def test_io_bound_example_serves_ten_at_once(examples_server: Server) -> None:
    # The bundled io-bound example (slow sync preprocess, predict_concurrency 5) answers all ten.
    async with httpx.AsyncClient(base_url=examples_server.url, timeout=10) as client:
        calls = [("/v1/models/io-bound:predict", {"url": "x" * i}, {}) for i in range(10)]
        answers = await gather_posts(client, calls)
    assert [a.json() for a in answers] == [{"length": i} for i in range(10)]


@pytest.mark.anyio
async def test_batching_groups_requests_and_answers_each_its_own(
    client: httpx.AsyncClient, events: EventLog, tag: str
) -> None:
    # Cell (inputs table, batching): predict receives a list of inputs, and a list of the
    # requests in the same order. batcher: batch_size 4, a batch closes only when full.
    calls = [
        ("/v1/models/batcher:predict", {"tag": tag, "x": x}, {"x-item": f"item-{x}"})
        for x in range(4)
    ]
    answers = await gather_posts(client, calls)
    assert [a.status_code for a in answers] == [200] * 4
    for x, answer in enumerate(answers):
        # Each request got its own result, computed from its own input and its own request.
        assert answer.json() == {"y": x * 10, "header": f"item-{x}", "batch": 4}
    (batch,) = [e for e in events.of(tag) if e["event"] == "batch"]
    assert batch["size"] == 4
    assert sorted(batch["xs"]) == [0, 1, 2, 3]


@pytest.mark.anyio
async def test_batch_sum_example_over_oip(examples_server: Server) -> None:
    async with httpx.AsyncClient(base_url=examples_server.url, timeout=10) as client:
        calls = [
            (
                "/v2/models/batch-sum/infer",
                {"inputs": [tensor("x", "FP64", [3], [i, i, i])]},
                {},
            )
            for i in range(8)
        ]
        answers = await gather_posts(client, calls)
    sums = [outputs_by_name(a.json())["sum"]["data"] for a in answers]
    assert sums == [[3.0 * i] for i in range(8)]


@pytest.mark.anyio
async def test_batch_of_the_wrong_length_is_500_naming_model_and_lengths(
    client: httpx.AsyncClient,
) -> None:
    r = await client.post("/v1/models/batch-wrong:predict", json={"x": 1})
    assert r.status_code == 500
    message = r.json()["error"]
    assert "'batch-wrong'" in message
    assert "returned 2 results" in message and "batch of 1 " in message
    r = await client.post("/v1/models/emit:predict", json={"kind": "number"})
    assert r.status_code == 200


@pytest.mark.anyio
async def test_batch_queue_full_is_503(
    client: httpx.AsyncClient, events: EventLog, gates: Gates, tag: str
) -> None:
    # batch-gated: batch_size 2, one batch at a time, max_queue_size 2. The first batch holds
    # the slot until the gate opens; two more requests fill the queue; the next is refused.
    gate = gates.new()
    answers: dict[int, httpx.Response] = {}

    async def call(i: int) -> None:
        body = {"tag": tag, "i": i, **({"gate": gate} if i == 0 else {})}
        answers[i] = await client.post("/v1/models/batch-gated:predict", json=body)

    async with anyio.create_task_group() as tg:
        tg.start_soon(call, 0)
        await events.wait_for(tag, "batch")
        tg.start_soon(call, 1)
        tg.start_soon(call, 2)
        await events.wait_for(tag, "queued", count=3)
        refused = await client.post("/v1/models/batch-gated:predict", json={"tag": tag, "i": 3})
        assert refused.status_code == 503
        message = refused.json()["error"]
        assert "'batch-gated'" in message and "queue is full" in message
        gates.open(gate)
    assert {i: a.json() for i, a in answers.items()} == {0: {"i": 0}, 1: {"i": 1}, 2: {"i": 2}}
    batches = [sorted(e["items"]) for e in events.of(tag) if e["event"] == "batch"]
    # 1 and 2 in one batch, or in two where the machine is slow enough that the 1 ms delay
    # closes a batch between them: either way after the first, which ran alone
    assert batches[0] == [0] and sorted(i for b in batches[1:] for i in b) == [1, 2]
    r = await client.post("/v1/models/batch-gated:predict", json={"tag": tag, "i": 4})
    assert (r.status_code, r.json()) == (200, {"i": 4})
