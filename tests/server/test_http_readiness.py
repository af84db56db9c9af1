"""Readiness end to end: a model still loading, a model whose load failed, and a busy model."""

from __future__ import annotations

import asyncio
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anyio
import httpx
import pytest
from conftest import Server, run_server
from e2e_helpers import PATIENCE, SLOW_MODELS, EventLog, Gates

pytest_plugins = ["e2e_fixtures"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.anyio
async def test_ready_is_503_while_a_model_loads_and_200_after(tmp_path: Path) -> None:
    # slow-load/slow's async load() waits for a file; slow-load/quick loads at once. The server
    # answers while loading, but run_server only returns once every model has loaded, so it is
    # entered in a thread on a port chosen here, and the test talks to the port meanwhile.
    gate = tmp_path / "loaded"
    port = free_port()
    starting = run_server(
        SLOW_MODELS,
        args=("--http-port", str(port)),
        env={"PODIUM_E2E_LOAD_GATE": str(gate)},
    )
    with ThreadPoolExecutor(1) as pool:
        entered = pool.submit(starting.__enter__)
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
                with anyio.fail_after(PATIENCE):
                    while True:
                        try:
                            live = await client.get("/v2/health/live")
                            break
                        except httpx.TransportError:
                            assert not entered.done(), entered.exception()
                            await anyio.sleep(0.01)
                assert live.status_code == 200

                r = await client.get("/v2/health/ready")
                assert (r.status_code, r.json()) == (503, {"ready": False})
                r = await client.get("/v2/models/slow/ready")
                assert (r.status_code, r.json()["ready"]) == (503, False)
                r = await client.get("/v1/models/slow")
                assert (r.status_code, r.json()) == (
                    503,
                    {"error": "Model with name slow is not ready."},
                )
                assert (await client.get("/v2/models/slow")).json()["parameters"]["state"] == (
                    "loading"
                )
                r = await client.post("/v1/models/slow:predict", json={})
                assert (r.status_code, r.json()) == (
                    503,
                    {"error": "Model with name slow is not ready. it is still loading."},
                )
                assert r.headers["x-baseten-error-code"] == "600"
                r = await client.get("/ping")
                assert r.json()["status"] != "Healthy"
                # The model that loads quickly serves meanwhile (once its load has run: loading
                # starts after every listener is bound, so wait for it, bounded).
                with anyio.fail_after(PATIENCE):
                    while True:
                        if (await client.get("/v2/models/quick/ready")).status_code == 200:
                            break
                        await anyio.sleep(0.01)
                r = await client.get("/v2/models/slow/ready")
                assert (r.status_code, r.json()["ready"]) == (503, False)  # still gated
                r = await client.post("/v1/models/quick:predict", json={})
                assert (r.status_code, r.json()) == (200, {"quick": True})

                gate.touch()
                server: Server = await asyncio.wrap_future(entered)
                assert server.url == f"http://127.0.0.1:{port}"

                r = await client.get("/v2/health/ready")
                assert (r.status_code, r.json()) == (200, {"ready": True})
                r = await client.get("/v1/models/slow")
                assert (r.status_code, r.json()) == (200, {})
                r = await client.post("/v1/models/slow:predict", json={})
                assert (r.status_code, r.json()) == (200, {"loaded": True})
                r = await client.get("/ping")
                assert (r.status_code, r.json()) == (200, {"status": "Healthy"})
        finally:
            gate.touch()
            if entered.exception() is None:
                starting.__exit__(None, None, None)


@pytest.mark.anyio
async def test_failed_load_is_reported_not_ready(failing_server: Server) -> None:
    async with httpx.AsyncClient(base_url=failing_server.url) as client:
        r = await client.get("/v2/health/ready")
        assert (r.status_code, r.json()) == (503, {"ready": False})
        assert (await client.get("/v2/health/live")).status_code == 200
        r = await client.get("/v1/models/failing")
        assert (r.status_code, r.json()) == (
            503,
            {"error": "Model with name failing is not ready."},
        )
        r = await client.get("/v2/models/failing/ready")
        assert r.status_code == 503
        meta = (await client.get("/v2/models/failing")).json()
        assert meta["parameters"]["state"] == "failed"
        assert "the weights file is missing (on purpose)" in meta["parameters"]["reason"]
        r = await client.get("/v1/models/fine")
        assert (r.status_code, r.json()) == (200, {})
        r = await client.get("/ping")
        assert r.json()["status"] != "Healthy"


@pytest.mark.anyio
async def test_health_answers_while_a_sync_predict_is_busy(
    client: httpx.AsyncClient, events: EventLog, gates: Gates, tag: str
) -> None:
    gate = gates.new()
    async with anyio.create_task_group() as tg:
        answers: list[httpx.Response] = []

        async def busy() -> None:
            answers.append(
                await client.post("/v1/models/gated:predict", json={"tag": tag, "gate": gate})
            )

        tg.start_soon(busy)
        await events.wait_for(tag, "predict-start")
        # The sync predict holds a pool thread and the model's only slot; the server answers.
        for path in ("/v2/health/ready", "/v2/health/live", "/v2/models/gated/ready", "/ping"):
            r = await client.get(path)
            assert r.status_code == 200, path
        r = await client.get("/v1/models/gated")
        assert (r.status_code, r.json()) == (200, {})
        r = await client.post("/v1/models/emit:predict", json={"kind": "number"})
        assert (r.status_code, r.json()) == (200, 42)
        assert "predict-end" not in events.names(tag)  # it really was busy all along
        gates.open(gate)
    assert answers[0].json() == {"tag": tag}
