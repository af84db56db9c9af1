"""``ts.handler_utils.micro_batching`` (TorchServe's ``examples/micro_batching``): a batch in
micro batches through preprocess → inference → postprocess, each step on its own threads, the
answers in the batch's order (tests/conformance/ts_examples.py serves TorchServe's example
handler with it, side by side with TorchServe)."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from conftest import run_server

from podium.compat.ts.handler_utils.micro_batching import MicroBatching


class _Metrics:
    def __init__(self) -> None:
        self.times: list[str] = []

    def add_time(self, name: str, value: float, idx: Any = None, unit: str = "ms") -> None:
        self.times.append(name)


class _Context:
    def __init__(self, headers: dict[str, str] | None = None) -> None:
        self.metrics = _Metrics()
        self.headers = headers or {}

    def get_request_header(self, idx: int, key: str) -> str | None:
        return self.headers.get(key)


class _Handler:
    """Records which micro batch and thread each step saw."""

    def __init__(self, fail: str | None = None) -> None:
        self.context: Any = None
        self.seen: list[tuple[str, int | None, str]] = []
        self.fail = fail
        self.lock = threading.Lock()
        self.handle = MicroBatching(self)

    def _note(self, step: str) -> None:
        with self.lock:
            self.seen.append(
                (step, self.handle.get_micro_batch_idx(), threading.current_thread().name)
            )
        if step == self.fail:
            raise RuntimeError(f"{step} failed")

    def preprocess(self, data: list[int]) -> list[int]:
        self._note("preprocess")
        return [x + 1 for x in data]

    def inference(self, data: list[int]) -> list[int]:
        self._note("inference")
        return [x * 10 for x in data]

    def postprocess(self, data: list[int]) -> list[str]:
        self._note("postprocess")
        return [f"answer {x}" for x in data]

    def _is_describe(self) -> bool:
        return self.context.get_request_header(0, "describe") == "True"

    def _is_explain(self) -> bool:
        return self.context.get_request_header(0, "explain") == "True"

    def describe_handle(self) -> str:
        return "described"

    def explain_handle(self, data_preprocess: list[int], raw: list[int]) -> list[int]:
        return data_preprocess


def test_micro_batches_come_back_in_the_batchs_order() -> None:
    handler = _Handler()
    handler.handle.micro_batch_size = 2
    handler.handle.parallelism = {"preprocess": 2, "inference": 1, "postprocess": 3}
    context = _Context()
    try:
        answers = handler.handle(list(range(7)), context)
    finally:
        handler.handle.shutdown()
    assert answers == [f"answer {(x + 1) * 10}" for x in range(7)]
    # 7 items in micro batches of 2: 4 micro batches, each through each step once
    for step in ("preprocess", "inference", "postprocess"):
        indices = sorted(i for s, i, _ in handler.seen if s == step)
        assert indices == [0, 1, 2, 3]
        threads = {t for s, _, t in handler.seen if s == step}
        assert all(t.startswith(f"micro-batch-{step}") for t in threads)
    assert len({t for s, _, t in handler.seen if s == "inference"}) == 1  # parallelism 1
    assert context.metrics.times == ["HandlerTime"]
    assert handler.handle.parallelism == {"preprocess": 2, "inference": 1, "postprocess": 3}
    assert handler.handle.get_micro_batch_idx() is None  # outside a step


def test_describe_and_explanations_skip_the_micro_batches() -> None:
    handler = _Handler()
    assert handler.handle([1], _Context({"describe": "True"})) == ["described"]
    assert handler.handle([1, 2], _Context({"explain": "True"})) == [2, 3]
    assert [s for s, _, _ in handler.seen] == ["preprocess"]  # explain_handle's preprocess
    handler.handle.shutdown()


def test_a_failing_step_fails_the_call() -> None:
    handler = _Handler(fail="inference")
    handler.handle.micro_batch_size = 1
    with pytest.raises(RuntimeError, match="inference failed"):
        handler.handle([1, 2, 3], _Context())
    assert not [s for s, _, _ in handler.seen if s == "postprocess"]
    handler.handle.shutdown()


@pytest.mark.parametrize(
    ("parallelism", "words"),
    [({"infer": 2}, "unknown steps ['infer']"), ({"inference": 0}, "inference needs a whole"),
     ({"preprocess": 1.5}, "preprocess needs a whole")],
)  # fmt: skip
def test_parallelism_is_checked(parallelism: dict[str, Any], words: str) -> None:
    handler = _Handler()
    with pytest.raises(ValueError, match=words.replace("[", r"\[").replace("]", r"\]")):
        handler.handle.parallelism = parallelism
    assert handler.handle.parallelism == {}


_HANDLER = '''
from ts.handler_utils.micro_batching import MicroBatching


class MicroBatcher:
    """TorchServe's example's form, without torch: handle is the MicroBatching pipeline."""

    def __init__(self):
        self.context = None
        self.handle = MicroBatching(self)

    def initialize(self, context):
        section = context.model_yaml_config.get("micro_batching", {})
        self.handle.micro_batch_size = section.get("micro_batch_size", 1)
        self.handle.parallelism = section.get("parallelism", {})

    def preprocess(self, data):
        return [row["body"]["x"] for row in data]

    def inference(self, xs):
        return [(x * 10, self.handle.get_micro_batch_idx(), len(xs)) for x in xs]

    def postprocess(self, ys):
        return [{"y": y, "micro_batch": i, "size": n} for y, i, n in ys]

    def _is_describe(self):
        return False

    def _is_explain(self):
        return False
'''

_CONFIG = """minWorkers: 1
maxWorkers: 1
batchSize: 4
maxBatchDelay: 60000
micro_batching:
  micro_batch_size: 2
  parallelism:
    preprocess: 2
    inference: 1
    postprocess: 2
"""


def test_a_real_server_serves_a_micro_batching_handler(tmp_path: Path) -> None:
    """Four requests in one batch (it closes only when full), cut into two micro batches of two;
    each answer is its own request's, in order."""
    model = tmp_path / "micro"
    model.mkdir()
    (model / "handler.py").write_text(_HANDLER)
    (model / "model-config.yaml").write_text(_CONFIG)

    async def four(url: str) -> list[httpx.Response]:
        answers: list[httpx.Response] = [httpx.Response(0)] * 4
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:

            async def one(x: int) -> None:
                answers[x] = await client.post("/predictions/micro", json={"x": x})

            async with anyio.create_task_group() as group:
                for x in range(4):
                    group.start_soon(one, x)
        return answers

    done = subprocess.run(
        [sys.executable, "-m", "podium", "archive", "--model-name", "micro", "--handler",
         str(model / "handler.py"), "--config-file", str(model / "model-config.yaml"),
         "--export-path", str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    with run_server(tmp_path / "micro.mar") as server:
        answers = anyio.run(four, server.url)
    assert [a.status_code for a in answers] == [200] * 4, [a.text for a in answers]
    got = sorted((a.json()["y"], a.json()["micro_batch"], a.json()["size"]) for a in answers)
    assert [y for y, _, _ in got] == [0, 10, 20, 30]
    assert sorted(i for _, i, _ in got) == [0, 0, 1, 1]  # two micro batches of two
    assert {n for _, _, n in got} == {2}
