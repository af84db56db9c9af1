"""The device a request ran on, end to end (docs/devices.md, "Seeing it"): a real
``podium serve --log-format json`` that believes it has two GPUs (``PODIUM_FAKE_GPUS=2``), real
HTTP clients. A model's own JSON log lines name its worker's GPU (thread workers and worker
processes; none on the CPU, and the access line keeps its keys), and the statistics extension's
``device_stats`` counts what ran on each GPU."""

from __future__ import annotations

import json
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import Server, run_server

TELL = """
import logging

logger = logging.getLogger("models.on")

class Model:
    def predict(self, inputs):
        logger.info("predicting")
        return {"ok": True}
"""


def _model(root: Path, name: str, config: str) -> Path:
    folder = root / name
    folder.mkdir()
    (folder / "model.py").write_text(textwrap.dedent(TELL))
    (folder / "config.yaml").write_text(textwrap.dedent(config))
    return folder


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("device-stats")
    models = [
        _model(root, "threads", "min_workers: 2\n"),
        _model(root, "procs", "workers: process\ndevices: [1]\n"),
        _model(root, "oncpu", "devices: cpu\n"),
    ]
    with run_server(
        *models, args=("--log-format", "json"), env={"PODIUM_FAKE_GPUS": "2"}, timeout=120
    ) as running:
        yield running


def _lines_about(server: Server, request_id: str, timeout: float = 10.0) -> list[dict[str, Any]]:
    """The model's line and the access line of ``request_id``, once both are there."""
    deadline = time.monotonic() + timeout
    while True:
        found = [json.loads(line) for line in list(server.lines) if line.startswith("{")]
        mine = [r for r in found if r.get("request_id") == request_id]
        if len(mine) >= 2 or time.monotonic() > deadline:
            return mine
        time.sleep(0.02)


def _call(server: Server, model: str, request_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    response = httpx.post(
        f"{server.url}/v1/models/{model}:predict",
        json={"x": 1},
        headers={"X-Request-ID": request_id},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    lines = _lines_about(server, request_id)
    (model_line,) = [r for r in lines if r["logger"] == "models.on"]
    (access,) = [r for r in lines if r["logger"] == "podium.access"]
    return model_line, access


def test_a_thread_workers_lines_name_its_gpu_and_the_access_line_is_unchanged(
    server: Server,
) -> None:
    seen = set()
    for i in range(6):
        line, access = _call(server, "threads", f"t-{i}")
        seen.add(line["device"])
        assert "device" not in access
    assert seen <= {"cuda:0", "cuda:1"}


def test_a_worker_process_lines_name_its_gpu_as_the_server_numbers_it(server: Server) -> None:
    line, _ = _call(server, "procs", "p-1")
    assert line["device"] == "cuda:1"  # (cuda:0 inside the process, which sees only it)
    assert line["worker"] == "1"


def test_a_cpu_models_lines_name_no_device(server: Server) -> None:
    line, _ = _call(server, "oncpu", "c-1")
    assert "device" not in line


def _stats(server: Server, model: str) -> dict[str, Any]:
    response = httpx.get(f"{server.url}/v2/models/{model}/stats", timeout=30)
    assert response.status_code == 200, response.text
    [entry] = response.json()["model_stats"]
    assert isinstance(entry, dict)
    return entry


def test_the_statistics_count_what_ran_on_each_gpu(server: Server) -> None:
    for i in range(4):
        _call(server, "threads", f"s-{i}")
    entry = _stats(server, "threads")
    devices = entry["device_stats"]
    assert {d["device"] for d in devices} <= {"cuda:0", "cuda:1"}
    assert sum(d["inference_count"] for d in devices) == entry["inference_count"]
    assert all(d["compute_infer"]["count"] == d["execution_count"] for d in devices)
    deadline = time.monotonic() + 10  # a worker process reports what it ran after it ran it
    while True:
        procs = _stats(server, "procs")
        ran = procs.get("device_stats", [])
        if ran and ran[0]["inference_count"] == procs["inference_count"]:
            break
        assert time.monotonic() < deadline, procs
        time.sleep(0.05)
    assert [d["device"] for d in ran] == ["cuda:1"]
    assert "device_stats" not in _stats(server, "oncpu")
