"""A TorchServe handler written for continuous batching, end to end: a real ``podium serve`` of
an archived handler with ``continuousBatching: true``; two streaming requests over
``/predictions/{model}``, the second joining the first's running batch. Judged by what each
step's items say about the batch they were made in, never by timing."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import httpx
import pytest
from conftest import run_server
from e2e_helpers import PATIENCE

from podium.model.torchserve import archive_model

# Each step's item names the tags that shared the step. The "long" request keeps going until it
# has seen the "short" one finish (coordination inside the handler, not timing).
HANDLER = """
import time


class Joiner:
    def initialize(self, context):
        self.short_done = False

    def handle(self, data, context):
        time.sleep(0.01)
        tags, out, criteria = [], [], []
        for idx, row in enumerate(data):
            req_id = context.request_ids[idx]
            if req_id not in context.cache:
                context.cache[req_id] = {"tag": row["body"]["tag"], "n": row["body"]["n"]}
            tags.append(context.cache[req_id]["tag"])
        for idx, tag in enumerate(tags):
            entry = context.cache[context.request_ids[idx]]
            entry["n"] -= 1
            done = entry["n"] <= 0 and (tag == "short" or self.short_done)
            if done and tag == "short":
                self.short_done = True
            out.append(f"{tag}:{'+'.join(sorted(tags))}:{'end' if done else 'more'}\\n")
            criteria.append(done)
        context.stopping_criteria = criteria
        return out
"""


@pytest.fixture
def model(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "handler.py").write_text(textwrap.dedent(HANDLER), encoding="utf-8")
    (src / "model-config.yaml").write_text(
        "continuousBatching: true\nbatchSize: 4\n", encoding="utf-8"
    )
    return archive_model(
        model_name="joiner",
        handler=src / "handler.py",
        export_path=tmp_path / "store",
        config_file=src / "model-config.yaml",
        archive_format="default",
    )


@pytest.mark.anyio
async def test_a_request_joins_a_running_torchserve_batch(model: Path) -> None:
    with run_server(model) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=PATIENCE) as client:
            started = asyncio.Event()

            async def run(tag: str, n: int) -> list[str]:
                items: list[str] = []
                body = {"tag": tag, "n": n}
                async with client.stream("POST", "/predictions/joiner", json=body) as r:
                    assert r.status_code == 200, await r.aread()
                    async for line in r.aiter_lines():
                        if line.strip():
                            items.append(line.strip())
                            started.set()
                return items

            long_task = asyncio.create_task(run("long", 3))
            await asyncio.wait_for(started.wait(), PATIENCE)  # the long one is running
            short = await run("short", 2)
            long = await long_task

    assert long[0] == "long:long:more"  # alone at first
    assert short == ["short:long+short:more", "short:long+short:end"]  # joined, shared steps
    assert "long:long+short:more" in long  # the long one saw the short one in its batch
    assert (
        long[-1].endswith(":end")
        and long.count("long:long:end") + long.count("long:long+short:end") == 1
    )
    assert all(item.endswith(":more") for item in long[:-1])
