"""The garbage collector's settings of serving processes (``podium/heap.py``): once started, the
server and each worker process have frozen what start-up built and collect generation 0 only
after ``GEN0_THRESHOLD`` net allocations."""

from __future__ import annotations

import gc
from pathlib import Path

import httpx
from conftest import run_server

from podium import heap

MODEL = """
import gc
import os


class Model:
    async def predict(self, request):
        return {"gen0": gc.get_threshold()[0], "frozen": gc.get_freeze_count(), "pid": os.getpid()}
"""


def test_settle_freezes_and_raises_generation_0s_threshold() -> None:
    before = gc.get_threshold()
    try:
        heap.settle()
        assert gc.get_threshold() == (heap.GEN0_THRESHOLD, before[1], before[2])
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_the_server_and_its_worker_processes_are_settled(tmp_path: Path) -> None:
    for name, workers in (("in-server", "thread"), ("in-worker", "process")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.py").write_text(MODEL)
        (tmp_path / name / "config.yaml").write_text(f"workers: {workers}\n")
    with run_server(tmp_path / "in-server", tmp_path / "in-worker") as server:
        pids = set()
        for name in ("in-server", "in-worker"):
            answer = httpx.post(f"{server.url}/v1/models/{name}:predict", json={}, timeout=30)
            assert answer.status_code == 200, answer.text
            found = answer.json()
            assert found["gen0"] == heap.GEN0_THRESHOLD, (name, found)
            assert found["frozen"] > 0, (name, found)
            pids.add(found["pid"])
        assert server.proc.pid in pids and len(pids) == 2  # (one answer from a worker process)
