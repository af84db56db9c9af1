"""Thread workers' instances load one at a time in a server (libraries' lazy imports are not
all thread-safe: two transformers models loading at once in threads fail); process workers
load in parallel, each in its own process."""

from __future__ import annotations

import asyncio
import textwrap
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from podium.runtime.loading import build_path
from podium.runtime.registry import ModelState

MODEL = """
    import json, os, threading, time

    LOG = {log!r}

    class Model:
        def load(self):
            with open(LOG, "a") as f:
                f.write(json.dumps(["in", {name!r}, threading.get_ident()]) + "\\n")
            time.sleep(0.2)  # a load long enough for another to start meanwhile, were it let
            with open(LOG, "a") as f:
                f.write(json.dumps(["out", {name!r}, threading.get_ident()]) + "\\n")

        def predict(self, inputs):
            return inputs
"""


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(4) as pool:
        yield pool


@pytest.mark.anyio
async def test_thread_workers_of_several_models_load_one_at_a_time(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    log = tmp_path / "loads.jsonl"
    versions = []
    for name in ("a", "b", "c"):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "model.py").write_text(textwrap.dedent(MODEL.format(log=str(log), name=name)))
        (folder / "config.yaml").write_text("min_workers: 2\nmax_workers: 2\n")
        versions += build_path(folder, {}, secrets={}, executor=executor)
    try:
        await asyncio.gather(*(mv.load() for mv in versions))
        assert all(mv.state is ModelState.READY for mv in versions)
        events = [line.split('"')[1] for line in log.read_text().splitlines()]
        # every load ends before the next begins: six loads (three models, two workers each)
        assert events == ["in", "out"] * 6
    finally:
        await asyncio.gather(*(mv.close() for mv in versions))
