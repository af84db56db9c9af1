"""The request paths leave no cyclic garbage: what a request makes is freed by reference
counting when it ends, on success and on every error, so that the garbage collector, which
serving processes run rarely (``podium/heap.py``), never has to find a request's objects (a
model's tensors among them) in a cycle. Each case runs in process through the HTTP app and its
access middleware, with the collector off; ``gc.collect()`` must then find nothing."""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import run_server
from helpers import wait_until

from podium.config import ServerConfig
from podium.dataplane import DataPlane
from podium.server import Podium
from podium.server._access import AccessLog, RequestIds
from podium.server._limits import LOST_HOOK, LostHook
from podium.server.http import INFERENCE_ROUTES, AccessMiddleware, HttpApp

MODELS = {
    "echo": "class Model:\n    async def predict(self, request):\n        return request\n",
    "sync-echo": "class Model:\n    def predict(self, request):\n        return request\n",
    "fails": (
        "class Model:\n    async def predict(self, request):\n"
        "        raise ValueError('no: ' + str(request))\n"
    ),
    "sync-fails": (
        "class Model:\n    def predict(self, request):\n"
        "        raise ValueError('no: ' + str(request))\n"
    ),
    "waits": (
        "import asyncio\n\nclass Model:\n    async def predict(self, request):\n"
        "        await asyncio.sleep(30)\n"
    ),
    "streams": (
        "class Model:\n    async def predict(self, request):\n"
        "        for i in range(3):\n            yield {'i': i}\n"
    ),
    "raw-request": (
        "from starlette.requests import Request\n\n"
        "class Model:\n    async def predict(self, request: Request):\n"
        "        return {'got': len(await request.body())}\n"
    ),
    "batch-fails": (
        "class Model:\n    def predict(self, batch):\n"
        "        raise ValueError('no: ' + str(len(batch)))\n"
    ),
    "stream-fails": (
        "class Model:\n    async def predict(self, request):\n"
        "        yield {'i': 0}\n        raise ValueError('no')\n"
    ),
}
MODELS["fails-in-a-process"] = MODELS["fails"]
MODELS["stream-fails-in-a-process"] = MODELS["stream-fails"]
CONFIGS = {
    "batch-fails": "batch_size: 4\nmax_batch_delay: 1\n",
    "fails-in-a-process": "workers: process\n",
    "stream-fails-in-a-process": "workers: process\n",
}
OIP = b'{"inputs":[{"name":"x","shape":[1,%d],"datatype":"FP32","data":[1,2,3,4]}]}'
CASES = {
    "answered": ("POST", "/v1/models/echo:predict", b'{"a": 1}', 200),
    "answered by a thread": ("POST", "/v1/models/sync-echo:predict", b'{"a": 1}', 200),
    "oip": ("POST", "/v2/models/echo/infer", OIP % 4, 200),
    "stream": ("POST", "/v1/models/streams:predict", b"{}", 200),
    "unknown model": ("POST", "/v2/models/nope/infer", b"{}", 404),
    "no route": ("GET", "/nowhere", b"", 404),
    "body not json": ("POST", "/v1/models/echo:predict", b"{no", 400),
    "wrong shape": ("POST", "/v2/models/echo/infer", OIP % 3, 400),
    "model raises": ("POST", "/v1/models/fails:predict", b"{}", 500),
    "model raises in a thread": ("POST", "/v1/models/sync-fails:predict", b"{}", 500),
    "model takes the raw request": ("POST", "/v1/models/raw-request:predict", b"{}", 200),
    "batch raises": ("POST", "/v1/models/batch-fails:predict", b"{}", 500),
    # (the stream's head is out: its error ends the chunked body)
    "stream raises": ("POST", "/v1/models/stream-fails:predict", b"{}", 200),
    # the server's side of a process worker (what the worker process holds is its own)
    "model raises in a process": ("POST", "/v1/models/fails-in-a-process:predict", b"{}", 500),
    "stream raises in a process": (
        "POST",
        "/v1/models/stream-fails-in-a-process:predict",
        b"{}",
        200,
    ),
}
ROUNDS = 20


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[AccessMiddleware]:
    for name, source in MODELS.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.py").write_text(source)
        if name in CONFIGS:
            (tmp_path / name / "config.yaml").write_text(CONFIGS[name])
    with ThreadPoolExecutor(2) as executor:
        plane = DataPlane(executor=executor)
        plane.repository.add_paths([tmp_path / name for name in MODELS])
        await plane.repository.load_all()
        # No records: a test's log capture would hold the 500s' errors (and keep any cycle
        # through them reachable, hidden from the collector).
        logging.disable(logging.CRITICAL)
        try:
            yield AccessMiddleware(
                HttpApp(plane), log=AccessLog(), ids=RequestIds(), routes=INFERENCE_ROUTES
            )
        finally:
            logging.disable(logging.NOTSET)
            await plane.close()  # the models too: the process workers end


def scope(method: str, path: str, body: bytes) -> dict[str, Any]:
    return {
        "type": "http",
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        LOST_HOOK: LostHook(),
    }


def receiver(body: bytes) -> Any:
    """The server's ``receive``: the body, then nothing until the client leaves."""
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop()
        await asyncio.Event().wait()  # the client stays (the request's end cancels this)
        raise AssertionError

    return receive


async def serve(app: AccessMiddleware, method: str, path: str, body: bytes) -> int:
    statuses: list[int] = []
    receive = receiver(body)

    async def send(sent: dict[str, Any]) -> None:
        if sent["type"] == "http.response.start":
            statuses.append(sent["status"])

    await app(scope(method, path, body), receive, send)
    return statuses[0]


async def cyclic_garbage(rounds: Any) -> int:
    """What the collector finds after ``rounds()`` ran with it off."""
    gc.collect()
    gc.disable()
    try:
        await rounds()
        await asyncio.sleep(0.05)  # what ends after the responses (access lines, threads)
        return gc.collect()
    finally:
        gc.enable()


@pytest.mark.anyio
@pytest.mark.parametrize("case", list(CASES))
async def test_a_request_leaves_no_cyclic_garbage(app: AccessMiddleware, case: str) -> None:
    method, path, body, status = CASES[case]
    assert await serve(app, method, path, body) == status  # (warm: first-use caches)

    async def rounds() -> None:
        for _ in range(ROUNDS):
            assert await serve(app, method, path, body) == status

    assert await cyclic_garbage(rounds) == 0


@pytest.mark.anyio
async def test_a_request_whose_client_leaves_leaves_no_cyclic_garbage(
    app: AccessMiddleware,
) -> None:
    async def leave() -> None:
        made = scope("POST", "/v1/models/waits:predict", b"{}")
        receive = receiver(b"{}")

        async def send(sent: dict[str, Any]) -> None:
            raise AssertionError("nothing is sent to a client that left")

        task = asyncio.create_task(app(made, receive, send))
        hook: LostHook = made[LOST_HOOK]
        await wait_until(lambda: hook.callback is not None, what="the model running")
        hook.callback()  # the connection is lost: the model is cancelled, nothing is sent
        await task

    await leave()  # (warm)

    async def rounds() -> None:
        for _ in range(ROUNDS):
            await leave()

    assert await cyclic_garbage(rounds) == 0


GRPC_CLIENT = """
import sys

import numpy as np
import tritonclient.grpc as tg
from tritonclient.utils import InferenceServerException

client = tg.InferenceServerClient(sys.argv[1])
good = tg.InferInput("x", [1, 4], "FP32")
good.set_data_from_numpy(np.ones((1, 4), np.float32))
bad = tg.InferInput("x", [1, 4], "FP32")
bad.set_data_from_numpy(np.ones((1, 4), np.float32))
bad.set_shape([1, 5])  # (4 elements for 5: refused)
for _ in range(int(sys.argv[2])):
    client.infer("echo", [good])
    for model, inputs in (("echo", [bad]), ("nope", [good])):
        try:
            client.infer(model, inputs)
        except InferenceServerException:
            pass
        else:
            raise SystemExit("an error was expected")
    # a stream (ModelStreamInfer): one request, its answer
    answers = []
    client.start_stream(callback=lambda result, error: answers.append((result, error)))
    client.async_stream_infer("echo", [good])
    client.stop_stream()
    assert answers and answers[0][1] is None, answers
"""


@pytest.mark.anyio
async def test_grpc_calls_leave_no_cyclic_garbage(tmp_path: Path) -> None:
    # OIP over gRPC runs on the bridge (server/grpc/bridge): its calls and their contexts
    # refer to each other until the call is over on every side
    (tmp_path / "echo").mkdir()
    (tmp_path / "echo" / "model.py").write_text(MODELS["echo"])
    config = ServerConfig(
        host="127.0.0.1",
        http_port=0,
        grpc_port=0,
        management_port=0,
        grpc_management_port=0,
        metrics=False,
        auth=False,
    )
    podium = Podium(config, [tmp_path / "echo"])
    address = ""

    async def client(rounds: int) -> None:
        done = await asyncio.create_subprocess_exec(
            sys.executable, "-c", GRPC_CLIENT, address, str(rounds)
        )
        assert await done.wait() == 0

    logging.disable(logging.CRITICAL)
    try:
        await podium.start()
        address = podium.addresses["grpc-inference"]
        await client(1)  # (warm)

        async def rounds() -> None:
            await client(10)

        found = await cyclic_garbage(rounds)
    finally:
        logging.disable(logging.NOTSET)
        await podium.stop()
    assert found == 0


WORKER_MODEL = """
import gc


class Model:
    async def predict(self, request):
        if request.get("collect"):
            return {"found": gc.collect()}
        raise ValueError("no")
"""


def test_a_worker_process_keeps_no_cyclic_garbage_of_failed_requests(tmp_path: Path) -> None:
    # The worker process's side: what gc.collect() finds there, asked of the model itself
    (tmp_path / "worker").mkdir()
    (tmp_path / "worker" / "model.py").write_text(WORKER_MODEL)
    (tmp_path / "worker" / "config.yaml").write_text("workers: process\n")
    with run_server(tmp_path / "worker") as server, httpx.Client(timeout=30) as client:
        url = f"{server.url}/v1/models/worker:predict"

        def collect() -> int:
            answer = client.post(url, json={"collect": True})
            assert answer.status_code == 200, answer.text
            return int(answer.json()["found"])

        client.post(url, json={})  # (warm)
        collect()
        for _ in range(ROUNDS):
            assert client.post(url, json={}).status_code == 500
        assert collect() == 0
