"""A client that goes away: streams are closed, waiting requests never run, long predicts are
cancelled, and the slots they held serve the next request. Judged by the models' event logs."""

from __future__ import annotations

import json

import anyio
import httpx
import pytest
from conftest import Server
from e2e_helpers import PATIENCE, EventLog, Gates, RawHttp, text
from httpx_sse import aconnect_sse

pytest_plugins = ["e2e_fixtures"]

ROUTES = ["/v1/models/{m}:predict", "/predictions/{m}", "/v2/models/{m}/generate_stream"]


async def leave_after_first_item(server: Server, route: str, body: dict) -> bytes:
    """Send ``body``, read the first chunk (or SSE event), then drop the connection."""
    raw = await RawHttp.connect(server.url)
    try:
        await raw.send(
            "POST", route, json.dumps(body).encode(), {"content-type": "application/json"}
        )
        status, _ = await raw.head()
        assert status == 200
        first = await raw.chunk()
        assert first is not None
        return first
    finally:
        await raw.close()


async def slot_is_free(client: httpx.AsyncClient, model: str, tag: str) -> None:
    """The model (predict_concurrency 1) runs a new request at once, well before the
    abandoned one's gate would time out on its own."""
    with anyio.fail_after(PATIENCE / 2):
        r = await client.post(f"/v1/models/{model}:predict", json={"tag": tag, "n": 1})
    assert r.status_code == 200
    assert r.text == "w0 "


@pytest.mark.anyio
@pytest.mark.parametrize("route", ROUTES)
async def test_async_generator_is_closed_and_its_slot_freed(
    models_server: Server,
    client: httpx.AsyncClient,
    events: EventLog,
    gates: Gates,
    tag: str,
    route: str,
) -> None:
    gate = gates.new()  # never opened while the stream lives: the model waits after item 0
    body = {"tag": tag, "n": 3, "gate": gate}
    first = await leave_after_first_item(models_server, route.format(m="streamer"), body)
    assert b"w0 " in first
    (ended,) = await events.wait_for(tag, "exit")
    assert ended["exc"] in ("CancelledError", "GeneratorExit")
    await events.wait_for(tag, "finally")
    assert "end" not in events.names(tag)
    assert "gate-timeout" not in events.names(tag)

    await slot_is_free(client, "streamer", tag + "-next")
    order = events.across(tag, tag + "-next")
    assert order.index((tag, "finally")) < order.index((tag + "-next", "start"))


@pytest.mark.anyio
@pytest.mark.parametrize("route", ROUTES)
async def test_sync_generator_is_closed_and_its_slot_freed(
    models_server: Server,
    client: httpx.AsyncClient,
    events: EventLog,
    gates: Gates,
    tag: str,
    route: str,
) -> None:
    gate = gates.new()
    body = {"tag": tag, "n": 3, "gate": gate}
    first = await leave_after_first_item(models_server, route.format(m="streamer-sync"), body)
    assert b"w0 " in first
    # The slot is free at once, even if the generator's thread is still inside its next step
    # (waiting for the gate, which stays shut): the next request runs meanwhile.
    await slot_is_free(client, "streamer-sync", tag + "-next")
    # The generator is closed (GeneratorExit at a yield) before that step or as soon as the
    # step returns; it never runs to its end.
    gates.open(gate)
    (ended,) = await events.wait_for(tag, "exit")
    assert ended["exc"] == "GeneratorExit"
    await events.wait_for(tag, "finally")
    assert "end" not in events.names(tag)
    assert [e["i"] for e in events.of(tag) if e["event"] == "item"] in ([0], [0, 1])


@pytest.mark.anyio
async def test_sse_client_closing_with_httpx_closes_the_generator(
    client: httpx.AsyncClient, events: EventLog, gates: Gates, tag: str
) -> None:
    gate = gates.new()
    body = {"inputs": [text("tag", tag), text("n", "3"), text("gate", gate)]}
    async with aconnect_sse(client, "POST", "/v2/models/streamer/infer_stream", json=body) as s:
        async for event in s.aiter_sse():
            assert json.loads(event.data)["outputs"][0]["data"] == ["w0 "]
            break
    await events.wait_for(tag, "finally")
    assert "end" not in events.names(tag)
    await slot_is_free(client, "streamer", tag + "-next")


@pytest.mark.anyio
async def test_request_waiting_for_a_slot_never_runs_once_its_client_left(
    models_server: Server,
    client: httpx.AsyncClient,
    events: EventLog,
    gates: Gates,
    tag: str,
) -> None:
    # gated: predict_concurrency 1 and one waiting place (max_queue_size 1).
    holder, leaver, follower = f"{tag}-holder", f"{tag}-leaver", f"{tag}-follower"
    gate = gates.new()
    answers: dict[str, httpx.Response] = {}

    async def call(name: str, body: dict) -> None:
        answers[name] = await client.post("/v1/models/gated:predict", json=body)

    async with anyio.create_task_group() as tg:
        tg.start_soon(call, "holder", {"tag": holder, "gate": gate})
        await events.wait_for(holder, "predict-start")

        raw = await RawHttp.connect(models_server.url)
        await raw.send("POST", "/v1/models/gated:predict", json.dumps({"tag": leaver}).encode())
        await events.wait_for(leaver, "preprocess")  # it now waits for the slot
        await raw.close()
        # The server read the leaver's EOF before any of these requests: after a few round
        # trips it has long run the few loop turns that drop the waiter.
        for _ in range(5):
            assert (await client.get("/v2/health/live")).status_code == 200

        # The waiting place was given back: the follower is admitted, not refused (503).
        tg.start_soon(call, "follower", {"tag": follower})
        await events.wait_for(follower, "preprocess")
        gates.open(gate)
    assert answers["holder"].json() == {"tag": holder}
    assert answers["follower"].status_code == 200, answers["follower"].text
    assert events.names(leaver) == ["preprocess"]  # its predict never ran
    order = events.across(holder, follower)
    assert order.index((holder, "predict-end")) < order.index((follower, "predict-start"))


@pytest.mark.anyio
async def test_long_async_predict_is_cancelled_and_sees_the_disconnect(
    models_server: Server, client: httpx.AsyncClient, events: EventLog, tag: str
) -> None:
    raw = await RawHttp.connect(models_server.url)
    await raw.send("POST", "/v1/models/watcher:predict", json.dumps({"tag": tag}).encode())
    await events.wait_for(tag, "start")
    await raw.close()
    (cancelled,) = await events.wait_for(tag, "cancelled")
    # The model polling `await request.is_disconnected()` sees True.
    assert cancelled["disconnected"] is True
    assert "end" not in events.names(tag)
    # The same model still serves a client that stays.
    r = await client.post("/v1/models/watcher:predict", json={"tag": tag + "-stay", "steps": 2})
    assert (r.status_code, r.json()) == (200, {"completed": True})
