"""Shutdown end to end, as Kubernetes drives it: ``SIGTERM`` to a real ``podium serve`` while calls
are in flight on every protocol (OIP REST, Truss, TorchServe REST and gRPC, OIP gRPC unary and
``ModelStreamInfer``, SSE), on thread and process workers.

What ``docs/operations.md`` promises, checked in order: readiness turns false at once on every
probe while liveness stays true and new connections are still taken (``--shutdown-delay``);
then new connections are refused; calls that finish within ``--graceful-timeout`` succeed; calls
that outlive it are cut with "server shutting down" (503 / ``UNAVAILABLE`` / an SSE error
event); the process exits 0, its worker processes gone, and its log says what was drained and
what was cut. A second signal stops at once (exit 128 + the signal's number).

Each step is judged by what happened, in order (a probe answered on a new connection was made
before the listener closed; a cut call's model never saw its gate open), not by how soon. The
delay and the grace are the only windows the machine's speed must fit: what the test does
within each takes a small fraction of it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

import anyio
import grpc
import httpx
import pytest
from conftest import TEST_MODELS, Server, run_server
from e2e_helpers import PATIENCE, EventLog, Gates, oip, outputs_by_name
from google.protobuf import empty_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_helpers import Stubs, infer_request, outputs, target
from httpx_sse import aconnect_sse

pytest_plugins = ["e2e_fixtures", "grpc_fixtures"]

SHUTDOWN_MODELS = TEST_MODELS / "shutdown"
#: --shutdown-delay and --graceful-timeout of these tests' servers (seconds): the probes must be
#: made within the delay, the calls let go must end within the grace.
DELAY = 3.0
GRACE = 4.0
#: The calls the drain test starts, each twice: one finishes within the grace, one is cut.
KINDS = ("oip", "truss", "ts", "proc", "sse", "grpc", "grpcstream", "tsgrpc", "tsstream")


def _refused(url_or_target: str) -> bool:
    """Whether a new TCP connection to that listener is refused."""
    if "://" in url_or_target:
        parts = urlsplit(url_or_target)
        host, port = parts.hostname, parts.port
    else:
        host, _, port_text = url_or_target.rpartition(":")
        port = int(port_text)
    try:
        with socket.create_connection((host, port), timeout=PATIENCE):  # a safety net
            return False
    except ConnectionRefusedError:
        return True


async def _until(check: Callable[[], bool], limit: float) -> float:
    """Seconds until ``check()`` holds; fails the test after ``limit`` seconds."""
    start = time.monotonic()
    with anyio.fail_after(limit):
        while True:
            if check():
                return time.monotonic() - start
            await anyio.sleep(0.02)


async def _exit_code(server: Server, limit: float) -> int:
    await _until(lambda: server.proc.poll() is not None, limit)
    return server.proc.returncode


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


class Calls:
    """Calls started in the background; each one's outcome (or the exception it raised)."""

    def __init__(self, group: anyio.abc.TaskGroup) -> None:
        self.group = group
        self.done: dict[str, Any] = {}
        self._ended: dict[str, anyio.Event] = {}

    def start(self, name: str, call: Callable[[], Awaitable[Any]]) -> None:
        ended = self._ended[name] = anyio.Event()

        async def run() -> None:
            try:
                with anyio.fail_after(PATIENCE + GRACE + DELAY):
                    self.done[name] = await call()
            except Exception as exc:
                self.done[name] = exc
            finally:
                ended.set()

        self.group.start_soon(run)

    async def result(self, name: str) -> Any:
        with anyio.fail_after(PATIENCE + GRACE + DELAY):
            await self._ended[name].wait()
        return self.done[name]


# -- one call per protocol; each returns what the client saw ------------------------------------


async def _http(client: httpx.AsyncClient, method: str, path: str, **kwargs: Any) -> Any:
    r = await client.request(method, path, **kwargs)
    return r.status_code, r.text


async def _sse(client: httpx.AsyncClient, path: str, body: dict, started: anyio.Event) -> Any:
    """The events of an SSE stream; ``started`` is set at the first."""
    events = []
    async with aconnect_sse(client, "POST", path, json=body) as source:
        async for event in source.aiter_sse():
            events.append(json.loads(event.data))
            started.set()
    return events


async def _grpc(call: Awaitable[Any]) -> Any:
    try:
        return await call
    except grpc.aio.AioRpcError as exc:
        return exc.code(), exc.details()


async def _grpc_stream(call: Any, started: anyio.Event) -> Any:
    got = []
    try:
        async for response in call:
            got.append(response)
            started.set()
    except grpc.aio.AioRpcError as exc:
        return got, (exc.code(), exc.details())
    return got, None


@contextlib.asynccontextmanager
async def _clients(server: Server, ts: SimpleNamespace, pb: Any) -> AsyncIterator[SimpleNamespace]:
    limits = httpx.Limits(max_connections=100, max_keepalive_connections=0)
    async with (
        httpx.AsyncClient(base_url=server.url, timeout=30, limits=limits) as http,
        grpc.aio.insecure_channel(target(server)) as channel,
    ):
        yield SimpleNamespace(
            http=http,
            oip=Stubs(channel, pb),  # ModelStreamInfer in Triton's framing, the default
            ts=ts.grpc.InferenceAPIsServiceStub(channel),
            health=health_pb2_grpc.HealthStub(channel),
        )


@pytest.mark.slow
@pytest.mark.anyio
async def test_sigterm_drains_what_finishes_in_time_and_cuts_the_rest(
    tmp_path: Path, pb: Any, ts: SimpleNamespace
) -> None:
    events_path = tmp_path / "events.jsonl"
    events = EventLog(events_path)
    gates = Gates(tmp_path)
    finish, hold = gates.new(), gates.new()  # opened once draining; opened only at the end
    run = uuid.uuid4().hex[:8]
    with run_server(
        SHUTDOWN_MODELS,
        args=("--shutdown-delay", str(DELAY), "--graceful-timeout", str(GRACE)),
        env={"PODIUM_E2E_EVENTS": str(events_path)},
    ) as server:
        try:
            async with _clients(server, ts, pb) as c, anyio.create_task_group() as group:
                calls = Calls(group)
                streams: dict[str, anyio.Event] = {}

                def tag(name: str) -> str:
                    return f"{run}-{name}"

                for outcome, gate in (("ok", finish), ("cut", hold)):
                    body = {"tag": tag(f"oip-{outcome}"), "gate": gate}
                    calls.start(
                        f"oip-{outcome}",
                        lambda b=body: _http(
                            c.http, "POST", "/v2/models/held/infer", json=oip(**b)
                        ),
                    )
                    body = {"tag": tag(f"truss-{outcome}"), "gate": gate}
                    calls.start(
                        f"truss-{outcome}",
                        lambda b=body: _http(c.http, "POST", "/v1/models/held:predict", json=b),
                    )
                    body = {"tag": tag(f"ts-{outcome}"), "gate": gate}
                    calls.start(
                        f"ts-{outcome}",  # sync model code in a thread
                        lambda b=body: _http(c.http, "POST", "/predictions/held-sync", json=b),
                    )
                    body = {"tag": tag(f"proc-{outcome}"), "gate": gate}
                    calls.start(
                        f"proc-{outcome}",  # a worker process
                        lambda b=body: _http(c.http, "POST", "/predictions/held-proc", json=b),
                    )
                    streams[f"sse-{outcome}"] = first = anyio.Event()
                    body = oip(tag=tag(f"sse-{outcome}"), gate=gate)
                    calls.start(
                        f"sse-{outcome}",
                        lambda b=body, f=first: _sse(
                            c.http, "/v2/models/held-stream/generate_stream", b, f
                        ),
                    )
                    request = infer_request(pb, "held", tag=tag(f"grpc-{outcome}"), gate=gate)
                    calls.start(f"grpc-{outcome}", lambda r=request: _grpc(c.oip.ModelInfer(r)))
                    streams[f"grpcstream-{outcome}"] = first = anyio.Event()
                    request = infer_request(
                        pb, "held-stream", tag=tag(f"grpcstream-{outcome}"), gate=gate
                    )

                    async def one(r: Any = request) -> AsyncIterator[Any]:
                        yield r

                    calls.start(
                        f"grpcstream-{outcome}",
                        lambda o=one, f=first: _grpc_stream(c.oip.ModelStreamInfer(o()), f),
                    )
                    body = {"tag": tag(f"tsgrpc-{outcome}"), "gate": gate}
                    req = ts.pb2.PredictionsRequest(
                        model_name="held", input={"data": json.dumps(body).encode()}
                    )
                    calls.start(f"tsgrpc-{outcome}", lambda r=req: _grpc(c.ts.Predictions(r)))
                    streams[f"tsstream-{outcome}"] = first = anyio.Event()
                    body = {"tag": tag(f"tsstream-{outcome}"), "gate": gate}
                    req = ts.pb2.PredictionsRequest(
                        model_name="held-stream", input={"data": json.dumps(body).encode()}
                    )
                    calls.start(
                        f"tsstream-{outcome}",
                        lambda r=req, f=first: _grpc_stream(c.ts.StreamPredictions(r), f),
                    )

                async def idle() -> AsyncIterator[Any]:  # a stream open with nothing in flight
                    await anyio.sleep_forever()
                    yield infer_request(pb, "held", tag=tag("never"), gate=hold)

                opened = anyio.Event()
                calls.start(
                    "grpcstream-idle", lambda: _grpc_stream(c.oip.ModelStreamInfer(idle()), opened)
                )
                for name in KINDS:
                    for outcome in ("ok", "cut"):
                        await events.wait_for(tag(f"{name}-{outcome}"), "started")
                for first in streams.values():
                    with anyio.fail_after(PATIENCE):
                        await first.wait()
                proc_pid = events.of(tag("proc-ok"))[0]["pid"]

                # SIGTERM: not ready at once, on every probe; alive; still taking connections:
                # each HTTP probe comes on a new connection, so an answer shows one was taken.
                os.kill(server.proc.pid, signal.SIGTERM)
                signalled = time.monotonic()
                one_each = httpx.Limits(max_keepalive_connections=0)
                async with httpx.AsyncClient(
                    base_url=server.url, timeout=PATIENCE, limits=one_each
                ) as fresh:
                    with anyio.fail_after(PATIENCE):
                        while True:  # not ready before the listener closes: "at once"
                            if (await fresh.get("/v2/health/ready")).status_code == 503:
                                break
                            await anyio.sleep(0.01)
                    ping = await fresh.get("/ping")
                    assert (ping.status_code, ping.json()) == (500, {"status": "Unhealthy"})
                    live = await fresh.get("/v2/health/live")
                    assert (live.status_code, live.json()) == (200, {"live": True})
                ready = await c.oip.ServerReady(pb.ServerReadyRequest(), timeout=PATIENCE)
                assert ready.ready is False
                live = await c.oip.ServerLive(pb.ServerLiveRequest(), timeout=PATIENCE)
                assert live.live is True
                health = await c.health.Check(health_pb2.HealthCheckRequest(), timeout=PATIENCE)
                assert health.status == health_pb2.HealthCheckResponse.NOT_SERVING
                pinged = await c.ts.Ping(empty_pb2.Empty(), timeout=PATIENCE)
                assert json.loads(pinged.health) == {"status": "Unhealthy"}

                # After the delay, not before: new connections are refused, on HTTP and gRPC.
                await _until(lambda: _refused(server.url), DELAY + PATIENCE)
                assert time.monotonic() - signalled >= DELAY * 0.9
                await _until(lambda: _refused(target(server)), PATIENCE)
                async with grpc.aio.insecure_channel(target(server)) as late:
                    refused = await _grpc(
                        Stubs(late, pb).ServerLive(pb.ServerLiveRequest(), timeout=2)
                    )
                assert refused[0] is grpc.StatusCode.UNAVAILABLE

                # What finishes within the grace gets its answer, on every protocol.
                gates.open(finish)
                for name in ("oip", "truss", "ts", "proc"):
                    status, text = await calls.result(f"{name}-ok")
                    assert status == 200, (name, text)
                    assert tag(f"{name}-ok") in text
                sse = await calls.result("sse-ok")
                assert [outputs_by_name(e)["item"]["data"] for e in sse] == [[0], [1]], sse
                response = await calls.result("grpc-ok")
                assert outputs(response)["tag"] == [tag("grpc-ok").encode()]
                responses, error = await calls.result("grpcstream-ok")
                assert error is None and not any(r.error_message for r in responses)
                items = [outputs(r.infer_response)["item"] for r in responses]
                assert items == [[0], [1]], responses
                answer = await calls.result("tsgrpc-ok")
                assert json.loads(answer.prediction) == {"tag": tag("tsgrpc-ok")}
                responses, error = await calls.result("tsstream-ok")
                assert error is None
                assert [json.loads(r.prediction)["item"] for r in responses] == [0, 1]

                # What outlives the grace is cut, with the documented error.
                for name in ("oip", "truss", "ts", "proc"):
                    status, text = await calls.result(f"{name}-cut")
                    assert status == 503, (name, text)
                    body = json.loads(text)  # TorchServe's error body under /predictions
                    message = body["message"] if name in ("ts", "proc") else body["error"]
                    assert "server shutting down" in message, text
                    assert f"--graceful-timeout {GRACE:g} s" in text
                sse = await calls.result("sse-cut")
                assert outputs_by_name(sse[0])["item"]["data"] == [0]
                assert len(sse) == 2 and "server shutting down" in sse[1]["error"], sse
                for name in ("grpc", "tsgrpc"):
                    code, details = await calls.result(f"{name}-cut")
                    assert code is grpc.StatusCode.UNAVAILABLE, (name, details)
                    assert "server shutting down" in details, details
                # Triton's framing: an in-band error, then the stream ends as the client did.
                responses, error = await calls.result("grpcstream-cut")
                assert error is None, error
                first_response, cut = responses
                assert outputs(first_response.infer_response)["item"] == [0]
                assert "server shutting down" in cut.error_message, cut
                responses, (code, details) = await calls.result("tsstream-cut")
                assert [json.loads(r.prediction)["item"] for r in responses] == [0]
                assert code is grpc.StatusCode.UNAVAILABLE
                assert "server shutting down" in details, details
                assert "cancelled" in events.names(tag("oip-cut"))
                for name in KINDS:  # cut while waiting: no model gave up on its gate first
                    assert "finished" not in events.names(tag(f"{name}-cut")), name
                    assert "gate-timeout" not in events.names(tag(f"{name}-cut")), name
                # An open stream with nothing in flight is closed just after the cut.
                responses, (code, _) = await calls.result("grpcstream-idle")
                assert responses == [] and code is grpc.StatusCode.UNAVAILABLE
                group.cancel_scope.cancel()

            # gone with the cut calls' gate still shut: it waited for none of them
            assert await _exit_code(server, PATIENCE) == 0
            assert not _alive(proc_pid), "the worker process outlived the server"
        finally:
            gates.open_all()
    log = server.log
    assert re.search(r"shutting down on SIGTERM: not ready from now on; \d+ \(", log), log
    assert "cutting 9 (" in log, log
    assert re.search(r"stopped in [\d.]+ s: 9 \(.*\) call\(s\) finished while draining, 9 \(", log)
    assert "oip_rest model 'held': 1" in log and "torchserve_grpc model 'held': 1" in log


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_second_signal_stops_at_once(tmp_path: Path) -> None:
    events_path = tmp_path / "events.jsonl"
    events = EventLog(events_path)
    gates = Gates(tmp_path)
    hold = gates.new()
    tag = uuid.uuid4().hex
    with run_server(
        SHUTDOWN_MODELS,
        args=("--graceful-timeout", "60"),
        env={"PODIUM_E2E_EVENTS": str(events_path)},
    ) as server:
        try:
            async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
                async with anyio.create_task_group() as group:
                    calls = Calls(group)
                    for model in ("held", "held-proc"):
                        body = {"tag": f"{tag}-{model}", "gate": hold}
                        calls.start(
                            model,
                            lambda m=model, b=body: _http(
                                client, "POST", f"/predictions/{m}", json=b
                            ),
                        )
                    for model in ("held", "held-proc"):
                        await events.wait_for(f"{tag}-{model}", "started")
                    pid = events.of(f"{tag}-held-proc")[0]["pid"]
                    os.kill(server.proc.pid, signal.SIGTERM)
                    await _until(lambda: _refused(server.url), PATIENCE)
                    os.kill(server.proc.pid, signal.SIGTERM)
                    # 143, not the graceful 0: the held calls (a minute's grace, their gate
                    # shut) were not waited for
                    assert await _exit_code(server, PATIENCE) == 128 + signal.SIGTERM
                    for model in ("held", "held-proc"):
                        outcome = await calls.result(model)
                        if not isinstance(outcome, Exception):  # else: the connection closed
                            status, text = outcome
                            assert status == 503 and "a second stop signal" in text, text
                    assert not _alive(pid)
        finally:
            gates.open_all()
    assert "SIGTERM again: stopping at once" in server.log


def test_a_signal_while_the_models_load_stops_the_start(tmp_path: Path) -> None:
    # slow-load/slow's load() waits for a gate that never opens; slow-load/quick loads at once.
    cmd = [
        sys.executable,
        "-m",
        "podium",
        "serve",
        str(TEST_MODELS / "slow-load"),
        *("--host", "127.0.0.1", "--http-port", "0", "--grpc-port", "0"),
        *("--management-port", "0", "--grpc-management-port", "0", "--no-auth"),
    ]
    env = {**os.environ, "PODIUM_E2E_LOAD_GATE": str(tmp_path / "never")}
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    lines: list[str] = []
    loaded = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if "model 'quick' is ready" in line:
                loaded.set()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        assert loaded.wait(PATIENCE), "\n".join(lines)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(PATIENCE) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
        reader.join(5)
        if proc.stdout is not None:
            proc.stdout.close()
    log = "\n".join(lines)
    assert "stopped while starting" in log and "Podium is ready" not in log, log
