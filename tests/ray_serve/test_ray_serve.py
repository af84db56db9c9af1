"""Podium on a real, local Ray Serve instance (2 CPUs), started by this module and always shut
down: requests spread over a model's replicas, a sequence stays on the replica that holds its
state, SSE streams, a client that leaves cancels the model's generator in the replica, an unknown
model is a 404, and a killed replica fails only its own requests (and ends its sequences with a
410). Slow (Ray's start-up): run with the whole suite (``-m "slow or not slow"``, as
``python3 dev.py test`` and CI do)."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import socket
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from httpx_sse import aconnect_sse

from podium.ray import OIP_SERVICER, AppSettings, build

# Ray comes with the `ray` extra, which dev.py installs (CI too, where a missing Ray fails);
# elsewhere, a venv without it skips these tests and says why.
if os.environ.get("CI"):
    import ray
else:
    ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'podium[ray]'")
from ray import serve  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300), pytest.mark.anyio]

APP = "podium-test"

#: Each test model: its files. Their replicas reserve little CPU, so that all fit in 2.
MODELS = {
    "who": {
        "model.py": """
            import os

            class Model:
                def predict(self, inputs):
                    return {"pid": os.getpid()}
        """,
        "config.yaml": "min_workers: 2\nmax_workers: 2\nray: {num_cpus: 0.5}\n",
    },
    "tally": {
        "model.py": """
            import os
            import podium

            class Model:
                def predict(self, inputs, context: podium.Context):
                    total = context.state.get("total", 0) + inputs["x"]
                    context.state["total"] = total
                    return {"total": total, "pid": os.getpid()}
        """,
        "config.yaml": (
            "sequence_batching: true\nmin_workers: 2\nmax_workers: 2\nray: {num_cpus: 0.25}\n"
        ),
    },
    "drip": {
        "model.py": """
            import asyncio

            def first(value):
                # generate's form decodes each field as a tensor (strings as a list): its one
                # element
                if isinstance(value, list):
                    value = value[0]
                elif hasattr(value, "reshape"):
                    value = value.reshape(-1)[0]
                    value = value.item() if hasattr(value, "item") else value
                return value.decode() if isinstance(value, bytes) else value

            class Model:
                def __init__(self, config):
                    self.log = config["model_metadata"]["log"]

                async def predict(self, inputs):
                    tag = str(first(inputs.get("tag", "x")))
                    for i in range(int(first(inputs.get("n", 1000)))):
                        with open(self.log, "a") as f:
                            f.write(tag + "\\n")
                        yield {"i": i}
                        await asyncio.sleep(0.05)
        """,
        "config.yaml": "ray: {num_cpus: 0.25}\nmodel_metadata: {log: LOG}\n",
    },
    "echo": {
        "model.py": """
            from podium import InferenceRequest, InferenceResponse, ResponseOutput

            class Model:
                def predict(self, request: InferenceRequest) -> InferenceResponse:
                    return InferenceResponse(
                        outputs=[
                            ResponseOutput(
                                name=i.name, shape=i.shape, datatype=i.datatype, data=i.data
                            )
                            for i in request.inputs
                        ]
                    )
        """,
        "config.yaml": "ray: {num_cpus: 0}\n",
    },
    "slow": {
        "model.py": """
            import asyncio
            import os

            class Model:
                async def predict(self, inputs):
                    await asyncio.sleep(float(inputs.get("s", 0)))
                    return {"pid": os.getpid()}
        """,
        "config.yaml": (
            "min_workers: 2\nmax_workers: 2\npredict_concurrency: 16\nray: {num_cpus: 0}\n"
        ),
    },
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_models(root: Path) -> Path:
    log = root / "drip.log"
    for name, files in MODELS.items():
        for file, text in files.items():
            path = root / "models" / name / file
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(text).replace("LOG", str(log)))
    return log


class Cluster:
    def __init__(self, url: str, log: Path, grpc: str) -> None:
        self.url = url
        self.log = log
        self.grpc = grpc

    def steps(self, tag: str) -> int:
        if not self.log.exists():
            return 0
        return sum(1 for line in self.log.read_text().splitlines() if line == tag)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("ray")
    log = write_models(root)
    port, grpc_port = free_port(), free_port()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        serve.start(
            http_options={"host": "127.0.0.1", "port": port},
            grpc_options={"port": grpc_port, "grpc_servicer_functions": [OIP_SERVICER]},
        )
        application = build(AppSettings.from_args({"paths": str(root / "models")}))
        serve.run(application, name=APP, route_prefix="/")
        yield Cluster(f"http://127.0.0.1:{port}", log, f"127.0.0.1:{grpc_port}")
    finally:
        try:
            serve.shutdown()
        finally:
            ray.shutdown()


def replica_actors(model: str) -> list[ray.actor.ActorHandle]:
    """The replica actors of a model's deployment (Serve names them after it)."""
    names = [
        entry["name"]
        for entry in ray.util.list_named_actors(all_namespaces=True)
        if entry["namespace"] == "serve" and f"#model:{model}#" in entry["name"]
    ]
    return [ray.get_actor(name, namespace="serve") for name in names]


def pid_of(actor: ray.actor.ActorHandle) -> int:
    return int(ray.get(actor.__ray_call__.remote(lambda self: os.getpid()), timeout=30))


def test_requests_spread_over_both_replicas(cluster: Cluster) -> None:
    with httpx.Client(base_url=cluster.url, timeout=30) as client:
        pids = set()
        for _ in range(40):
            r = client.post("/v1/models/who:predict", json={})
            assert r.status_code == 200, r.text
            pids.add(r.json()["pid"])
        assert len(pids) == 2
        assert {pid_of(actor) for actor in replica_actors("who")} == pids


def test_oip_infer_and_metadata_through_the_ingress(cluster: Cluster) -> None:
    with httpx.Client(base_url=cluster.url, timeout=30) as client:
        assert client.get("/v2/health/ready").json() == {"ready": True}
        meta = client.get("/v2/models/who").json()
        assert meta["name"] == "who" and meta["parameters"]["state"] == "ready"
        body = {"inputs": [{"name": "x", "shape": [2], "datatype": "INT64", "data": [1, 2]}]}
        r = client.post("/v2/models/slow/infer", json=body)
        assert r.status_code == 200, r.text
        assert r.json()["model_name"] == "slow"


def test_oip_binary_tensors_and_torchserve_through_the_ingress(cluster: Cluster) -> None:
    import numpy as np
    import tritonclient.http as triton

    client = triton.InferenceServerClient(cluster.url.removeprefix("http://"))
    try:
        tensor = triton.InferInput("x", [3], "FP32")
        values = np.array([1.5, -2.0, 3.25], dtype=np.float32)
        tensor.set_data_from_numpy(values, binary_data=True)
        asked = [triton.InferRequestedOutput("x", binary_data=True)]
        result = client.infer("echo", [tensor], outputs=asked)
        assert result.get_response()["outputs"][0]["parameters"]["binary_data_size"] == 12
        np.testing.assert_array_equal(result.as_numpy("x"), values)
    finally:
        client.close()
    with httpx.Client(base_url=cluster.url, timeout=30) as http:
        r = http.post("/predictions/who", json={})
        assert r.status_code == 200, r.text
        assert "pid" in r.json()


def test_oip_grpc_through_serves_grpc_proxy(cluster: Cluster) -> None:
    import numpy as np
    import tritonclient.grpc as triton
    from tritonclient.utils import InferenceServerException

    client = triton.InferenceServerClient(cluster.grpc)
    try:
        assert client.is_server_live() and client.is_model_ready("echo")
        assert not client.is_model_ready("nowhere")
        assert client.get_model_metadata("echo").name == "echo"
        tensor = triton.InferInput("x", [3], "INT64")
        tensor.set_data_from_numpy(np.array([4, 5, 6], dtype=np.int64))
        result = client.infer("echo", [tensor])
        np.testing.assert_array_equal(result.as_numpy("x"), [4, 5, 6])
        # Podium's status for an unknown model, through Serve's proxy
        with pytest.raises(InferenceServerException) as info:
            client.infer("nowhere", [tensor])
        assert info.value.status() == "StatusCode.NOT_FOUND"
        assert "nowhere" in info.value.message()
        # a sequence over gRPC: its id comes back, and its state holds on one replica
        one = triton.InferInput("x", [1], "INT64")
        one.set_data_from_numpy(np.array([2], dtype=np.int64))
        results = [
            client.infer("tally", [one], sequence_id=77, sequence_start=(i == 0)) for i in range(3)
        ]
        assert [int(r.as_numpy("total").reshape(-1)[0]) for r in results] == [2, 4, 6]
        assert len({int(r.as_numpy("pid").reshape(-1)[0]) for r in results}) == 1
        # ModelStreamInfer (bidirectional): a generator model's items, each a response
        got: queue.Queue[tuple[object, object]] = queue.Queue()
        client.start_stream(callback=lambda result, error: got.put((result, error)))
        count = triton.InferInput("n", [1], "INT64")
        count.set_data_from_numpy(np.array([3], dtype=np.int64))
        client.async_stream_infer("drip", [count])
        items = []
        for _ in range(3):
            result, error = got.get(timeout=30)
            assert error is None, error
            items.append(int(result.as_numpy("i").reshape(-1)[0]))
        assert items == [0, 1, 2]
        client.stop_stream()
    finally:
        client.close()


def test_an_unknown_model_is_a_404(cluster: Cluster) -> None:
    with httpx.Client(base_url=cluster.url, timeout=30) as client:
        r = client.post("/v2/models/nowhere/infer", json={"inputs": []})
        assert r.status_code == 404
        assert "nowhere" in r.json()["error"]
        r = client.post("/predictions/nowhere", json={})
        assert r.status_code == 404


def test_a_sequence_stays_on_the_replica_that_holds_its_state(cluster: Cluster) -> None:
    header = "ts_request_sequence_id"
    with httpx.Client(base_url=cluster.url, timeout=30) as client:
        sequences = []
        for _ in range(6):  # new sequences go to the replica holding fewest: both get some
            r = client.post("/predictions/tally", json={"x": 1})
            assert r.status_code == 200, r.text
            sequences.append((r.headers[header], r.json()["pid"]))
        assert len({pid for _, pid in sequences}) == 2
        for step in range(2, 6):
            for sid, pid in sequences:
                r = client.post("/predictions/tally", json={"x": 1}, headers={header: sid})
                assert r.status_code == 200, r.text
                # the running total proves the state: it is only on the pinned replica
                assert r.json() == {"total": step, "pid": pid}
                assert r.headers[header] == sid
        # A client-chosen id over OIP, with Triton's start flag, is pinned the same way.
        body = {
            "inputs": [{"name": "x", "shape": [1], "datatype": "INT64", "data": [5]}],
            "parameters": {"sequence_id": "mine", "sequence_start": True},
        }
        r = client.post("/v2/models/tally/infer", json=body)
        assert r.status_code == 200, r.text


async def test_sse_stream_and_a_client_that_leaves_cancels_the_generator(
    cluster: Cluster,
) -> None:
    async with httpx.AsyncClient(base_url=cluster.url, timeout=30) as client:
        # a whole SSE stream
        body = {"tag": "whole", "n": 3}
        async with aconnect_sse(client, "POST", "/v2/models/drip/generate_stream", json=body) as s:
            assert s.response.status_code == 200
            events = [json.loads(event.data) async for event in s.aiter_sse()]
        assert [e["i"] for e in events] == [0, 1, 2]
        # a client that leaves after three items: the generator stops in the replica
        body = {"tag": "leaver", "n": 1000}
        async with aconnect_sse(client, "POST", "/v2/models/drip/generate_stream", json=body) as s:
            seen = 0
            async for _ in s.aiter_sse():
                seen += 1
                if seen == 3:
                    break
        # the generator would make ~20 steps a second; once cancelled it makes none
        deadline = time.monotonic() + 20
        while True:
            before = cluster.steps("leaver")
            await asyncio.sleep(1.0)
            after = cluster.steps("leaver")
            if after == before:
                break
            assert time.monotonic() < deadline, f"the generator still runs ({after} steps)"
        assert 3 <= after < 100
        assert cluster.steps("whole") == 3


async def test_a_killed_replica_fails_only_its_own_requests(cluster: Cluster) -> None:
    async with httpx.AsyncClient(base_url=cluster.url, timeout=60) as client:
        calls = [
            asyncio.ensure_future(client.post("/v1/models/slow:predict", json={"s": 4}))
            for _ in range(10)
        ]
        await asyncio.sleep(2.0)  # all of them running, spread over both replicas
        victim, survivor = replica_actors("slow")
        killed, kept = pid_of(victim), pid_of(survivor)
        ray.kill(victim, no_restart=True)
        answers = await asyncio.gather(*calls)
        failed = [r for r in answers if r.status_code != 200]
        served = [r for r in answers if r.status_code == 200]
        assert failed and served
        # the survivor served its own; a call that had not reached a replica yet when the kill
        # came (a loaded machine) may be served by Serve's replacement, never by the killed one
        assert kept in {r.json()["pid"] for r in served}
        assert killed not in {r.json()["pid"] for r in served}
        for r in failed:
            assert r.status_code == 500
            assert "died" in r.json()["error"], r.text
        assert killed != kept
        # Serve replaces the replica; the model serves on
        r = await client.post("/v1/models/slow:predict", json={})
        assert r.status_code == 200


async def test_a_sequence_whose_replica_died_ends_with_410(cluster: Cluster) -> None:
    header = "ts_request_sequence_id"
    async with httpx.AsyncClient(base_url=cluster.url, timeout=60) as client:
        r = await client.post("/predictions/tally", json={"x": 1})
        sid, pid = r.headers[header], r.json()["pid"]
        (actor,) = [a for a in replica_actors("tally") if pid_of(a) == pid]
        ray.kill(actor, no_restart=True)
        deadline = time.monotonic() + 30
        while True:  # until the router has seen the replica go
            r = await client.post("/predictions/tally", json={"x": 1}, headers={header: sid})
            if r.status_code != 500 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        assert r.status_code == 410, r.text
        assert "lost" in r.text and sid in r.text
        # the start flag begins it again, on a replica that runs, with an empty state
        r = await client.post(
            "/predictions/tally",
            json={"x": 7},
            headers={header: sid, "ts_request_sequence_start": "true"},
        )
        assert r.status_code == 200, r.text
        assert r.json()["total"] == 7 and r.json()["pid"] != pid


def test_pins_count_the_sequences_of_each_replica_and_forget_the_oldest() -> None:
    from podium.ray._router import Pins

    pins = Pins(limit=3)
    for sid, replica in (("a", "r1"), ("b", "r1"), ("c", "r2")):
        pins.pin(sid, replica)
    assert (pins.count("r1"), pins.count("r2")) == (2, 1)
    pins.pin("b", "r2")  # begun again elsewhere (start flag after its replica died)
    assert (pins.count("r1"), pins.count("r2")) == (1, 2)
    assert pins.get("a") == "r1"  # used: now the most recent
    pins.pin("d", "r1")  # over the limit: the least recently used ("c") goes
    assert pins.get("c") is None and len(pins) == 3
    assert (pins.count("r1"), pins.count("r2")) == (2, 1)
