"""A model in trouble is reported not ready, with the reason, end to end: a worker stuck past its
``response_timeout``, and a worker process that dies again and again. The server itself stays
ready and alive: one model's trouble is that model's (``docs/operations.md``)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import anyio
import grpc
import httpx
import pytest
from conftest import TEST_MODELS, Server, run_server
from e2e_helpers import PATIENCE, EventLog, Gates
from grpc_helpers import Stubs, target
from prometheus_client.parser import text_string_to_metric_families

pytest_plugins = ["e2e_fixtures", "grpc_fixtures"]

TROUBLE = TEST_MODELS / "trouble"


async def _until_status(client: httpx.AsyncClient, path: str, status: int, limit: float) -> Any:
    """Poll ``path`` until it answers ``status``; its JSON."""
    with anyio.fail_after(limit):
        while True:
            r = await client.get(path)
            if r.status_code == status:
                return r.json()
            await anyio.sleep(0.05)


def model_ready_metric(server: Server, model: str = "stuck") -> float:
    """``podium_model_ready`` for ``model``, from ``/metrics``."""
    text = httpx.get(server.addresses["http-metrics"] + "/metrics").text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "podium_model_ready" and sample.labels.get("model") == model:
                return sample.value
    raise AssertionError(f"no podium_model_ready for {model}")


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_worker_stuck_past_response_timeout_makes_its_model_not_ready(
    tmp_path: Path, pb: Any
) -> None:
    events_path = tmp_path / "events.jsonl"
    events = EventLog(events_path)
    gates = Gates(tmp_path)
    gate = gates.new()
    tag = uuid.uuid4().hex
    with run_server(TROUBLE / "stuck", env={"PODIUM_E2E_EVENTS": str(events_path)}) as server:
        try:
            async with (
                httpx.AsyncClient(base_url=server.url, timeout=30) as client,
                httpx.AsyncClient(base_url=server.management_url, timeout=10) as management,
                anyio.create_task_group() as group,
            ):
                answered: list[httpx.Response] = []

                async def call() -> None:
                    answered.append(
                        await client.post(
                            "/v1/models/stuck:predict", json={"tag": tag, "gate": gate}
                        )
                    )

                group.start_soon(call)
                await events.wait_for(tag, "started")
                # Past response_timeout (1 s) the predict is cancelled and ignores it; a second
                # later (STUCK_GRACE) its only worker counts as stuck.
                body = await _until_status(client, "/v2/models/stuck/ready", 503, PATIENCE)
                assert body["ready"] is False
                assert "ignored-cancel" in events.names(tag)
                meta = (await client.get("/v2/models/stuck")).json()["parameters"]
                assert meta["state"] == "ready"
                assert meta["trouble"].startswith("every worker is stuck: 1 call(s)"), meta
                (described,) = (await management.get("/models/stuck")).json()
                assert described["ready"] is False and described["state"] == "ready"
                assert "past response_timeout" in described["trouble"]
                assert (await client.get("/v1/models/stuck")).status_code == 503
                async with grpc.aio.insecure_channel(target(server)) as channel:
                    stubs = Stubs(channel, pb)
                    ready = await stubs.ModelReady(pb.ModelReadyRequest(name="stuck"), timeout=5)
                    assert ready.ready is False
                    # The server is alive and ready: the trouble is this model's.
                    assert (await stubs.ServerReady(pb.ServerReadyRequest(), timeout=5)).ready
                assert (await client.get("/v2/health/ready")).status_code == 200
                assert (await client.get("/v2/health/live")).status_code == 200
                assert model_ready_metric(server) == 0  # as the readiness routes say

                # Once the call returns, the model is ready again.
                gates.open(gate)
                await _until_status(client, "/v2/models/stuck/ready", 200, PATIENCE)
                (described,) = (await management.get("/models/stuck")).json()
                assert described["ready"] is True and "trouble" not in described
                assert model_ready_metric(server) == 1
            assert [r.status_code for r in answered] == [200]
        finally:
            gates.open_all()


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_crash_looping_worker_process_makes_its_model_not_ready() -> None:
    with run_server(TROUBLE / "crashloop") as server:
        async with (
            httpx.AsyncClient(base_url=server.url, timeout=10) as client,
            httpx.AsyncClient(base_url=server.management_url, timeout=10) as management,
        ):
            # Each worker dies 0.2 s after it is ready; the fifth loss within a minute makes
            # the model crash-looping (restarts back off: 0.1 s, 0.2 s, 0.4 s...).
            await _until_status(client, "/v2/models/crashloop/ready", 503, 4 * PATIENCE)
            (described,) = (await management.get("/models/crashloop")).json()
            assert described["ready"] is False
            assert described["state"] == "ready"  # it loaded, and its workers do start
            trouble = described["trouble"]
            assert trouble.startswith("crash-looping: 5 workers lost in the last 60 s"), trouble
            assert "exited with code 3" in trouble
            meta = (await client.get("/v2/models/crashloop")).json()["parameters"]
            assert meta["trouble"] == trouble or meta["trouble"].startswith("crash-looping")
            assert (await client.get("/v2/health/ready")).status_code == 200
            assert (await client.get("/v2/health/live")).status_code == 200
