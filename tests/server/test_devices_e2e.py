"""Devices end to end (docs/devices.md): a real server that believes it has four GPUs
(``PODIUM_FAKE_GPUS=4``), real clients. Thread workers spread over the GPUs and told theirs,
worker processes each seeing their own, a TorchServe handler's ``gpu_id`` from the same
assignment (``deviceIds``), the management describe and ``/metrics`` showing it all."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import Server, run_server
from prometheus_client.parser import text_string_to_metric_families

from podium.model.torchserve import archive_model

SPREAD = """
import podium

class Model:
    def __init__(self):
        self.device = podium.device()

    def predict(self, inputs):
        return {"device": self.device, "now": podium.device()}
"""

PROCS = """
import os, podium

class Model:
    def predict(self, inputs):
        return {"visible": os.environ["CUDA_VISIBLE_DEVICES"], "device": podium.device()}
"""

HANDLER = """
import podium

class Handler:
    def initialize(self, context):
        self.gpu_id = context.system_properties.get("gpu_id")

    def handle(self, data, context):
        return [{"gpu_id": self.gpu_id, "device": podium.device()} for _ in data]
"""


def _model(root: Path, name: str, code: str, config: str) -> Path:
    folder = root / name
    folder.mkdir()
    (folder / "model.py").write_text(textwrap.dedent(code))
    (folder / "config.yaml").write_text(textwrap.dedent(config))
    return folder


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("devices")
    spread = _model(root, "spread", SPREAD, "min_workers: 4\n")
    procs = _model(root, "procs", PROCS, "workers: process\ndevices: [0, 2]\nmin_workers: 2\n")
    cpu = _model(root, "oncpu", SPREAD, "devices: cpu\n")
    ts_src = root / "ts-src"
    ts_src.mkdir()
    (ts_src / "handler.py").write_text(textwrap.dedent(HANDLER))
    (ts_src / "model-config.yaml").write_text("minWorkers: 2\nmaxWorkers: 2\ndeviceIds: [1, 3]\n")
    ts = archive_model(
        model_name="ts",
        handler=ts_src / "handler.py",
        config_file=ts_src / "model-config.yaml",
        export_path=root,
        version="1.0",
        archive_format="no-archive",
    )
    with run_server(spread, procs, cpu, ts, env={"PODIUM_FAKE_GPUS": "4"}, timeout=120) as running:
        yield running


def _predict(server: Server, model: str, n: int) -> list[dict[str, object]]:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        out = []
        for i in range(n):
            response = client.post(f"/v1/models/{model}:predict", json={"i": i})
            assert response.status_code == 200, response.text
            out.append(response.json())
        return out


def _describe(server: Server, model: str) -> dict[str, object]:
    response = httpx.get(f"{server.management_url}/models/{model}", timeout=30)
    assert response.status_code == 200, response.text
    [description] = response.json()
    assert isinstance(description, dict)
    return description


def test_thread_workers_each_compute_on_their_own_gpu(server: Server) -> None:
    description = _describe(server, "spread")
    workers = description["workers"]
    assert isinstance(workers, list)
    assert [(w["devices"], w["device"], w["gpu"]) for w in workers] == [
        ([i], f"cuda:{i}", True) for i in range(4)
    ]
    assert description["deviceType"] == "gpu" and description["deviceIds"] == [0, 1, 2, 3]
    answers = _predict(server, "spread", 8)
    assert {a["device"] for a in answers} <= {f"cuda:{i}" for i in range(4)}
    assert all(a["device"] == a["now"] for a in answers)


def test_worker_processes_see_only_their_gpu(server: Server) -> None:
    workers = _describe(server, "procs")["workers"]
    assert isinstance(workers, list)
    assert sorted(w["device"] for w in workers) == ["cuda:0", "cuda:2"]
    answers = _predict(server, "procs", 12)
    assert {a["device"] for a in answers} == {"cuda:0"}  # renumbered inside each process
    assert {a["visible"] for a in answers} <= {"0", "2"}


def test_a_torchserve_handlers_gpu_id_comes_from_its_assignment(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        ids = {client.post("/predictions/ts", json={"x": 1}).json()["gpu_id"] for _ in range(8)}
    assert ids <= {1, 3}
    workers = _describe(server, "ts")["workers"]
    assert isinstance(workers, list)
    assert sorted(w["device"] for w in workers) == ["cuda:1", "cuda:3"]
    assert all(w["gpuUsage"].startswith("gpuId::") for w in workers)


def test_a_cpu_model_on_a_gpu_machine_stays_on_the_cpu(server: Server) -> None:
    [answer] = _predict(server, "oncpu", 1)
    assert answer == {"device": "cpu", "now": "cpu"}
    description = _describe(server, "oncpu")
    assert description["devices"] == "cpu" and description["deviceType"] == "cpu"
    workers = description["workers"]
    assert isinstance(workers, list)
    assert workers[0]["gpu"] is False and workers[0]["gpuUsage"] == "N/A"


def test_metrics_show_every_gpu_and_each_workers_device(server: Server) -> None:
    response = httpx.get(server.addresses["http-metrics"] + "/metrics", timeout=30)
    assert response.status_code == 200
    samples = {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }
    totals = {
        dict(k[1])["gpu"]: v for k, v in samples.items() if k[0] == "nv_gpu_memory_total_bytes"
    }
    assert totals == {str(i): float(16 << 30) for i in range(4)}
    assert {dict(k[1])["gpu"] for k in samples if k[0] == "nv_gpu_utilization"} == {
        "0",
        "1",
        "2",
        "3",
    }
    on = sorted(
        (dict(k[1])["model"], dict(k[1])["device"])
        for k in samples
        if k[0] == "podium_worker_device"
    )
    assert ("oncpu", "cpu") in on
    assert [d for m, d in on if m == "spread"] == ["cuda:0", "cuda:1", "cuda:2", "cuda:3"]
    assert [d for m, d in on if m == "ts"] == ["cuda:1", "cuda:3"]
