"""``ts.handler_utils.micro_batching`` (TorchServe's ``examples/micro_batching``): a batch in
micro batches through preprocess → inference → postprocess, each step on its own threads, the
answers in the batch's order (tests/conformance/ts_examples.py serves TorchServe's example
handler with it, side by side with TorchServe)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

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
