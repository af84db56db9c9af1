"""TorchServe handlers written for continuous batching (``continuousBatching: true``): the
instance's ``step`` called directly with ``Generation`` objects, as the continuous scheduler
calls it. Judged by what each step passed to the handler and what each request got."""

from __future__ import annotations

import asyncio
import textwrap
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from ts_kit import FakeRequest, load

from podium.errors import DefinitionError, ModelError
from podium.model.torchserve import archive_model
from podium.model.torchserve._config import model_config
from podium.types import Generation

# In the style of TorchServe's continuous-batching test handler: a request is recognised through
# context.cache by its request id; stopping_criteria is set per call, indexed by batch position.
COUNTDOWN = """
from ts.protocol.otf_message_handler import send_intermediate_predict_response


class CountdownHandler:
    def initialize(self, context):
        self.context = context
        self.calls = []  # what each step received: (request id, data row) per request

    def handle(self, data, context):
        self.calls.append([(context.request_ids[i], row) for i, row in enumerate(data)])
        out, criteria = [], []
        for idx, row in enumerate(data):
            req_id = context.request_ids[idx]
            if req_id not in context.cache:
                body = row["body"]
                context.cache[req_id] = {"tag": body["tag"], "left": body["n"]}
            entry = context.cache[req_id]
            entry["left"] -= 1
            if entry["tag"].startswith("chatty"):
                send_intermediate_predict_response(
                    {idx: f"{entry['tag']}:pre"}, {idx: req_id}, "Intermediate", 200, context
                )
            out.append(f"{entry['tag']}:{entry['left']}")
            criteria.append(self._stop(req_id))
        context.stopping_criteria = criteria
        return out

    def _stop(self, req_id):
        def stop(value):
            if value.endswith(":0"):
                del self.context.cache[req_id]
                return True
            return False
        return stop
"""

ONE_SHOT = """
def handle(data, context):
    if data is None:
        return None
    return [{"echo": row.get("body")} for row in data]
"""

CONFIG = """
continuousBatching: true
batchSize: 4
"""


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    pool = ThreadPoolExecutor(2)
    yield pool
    pool.shutdown(wait=True)


def handler_model(tmp_path: Path, source: str, config: str = CONFIG) -> Path:
    src = tmp_path / "src"
    src.mkdir(parents=True, exist_ok=True)
    (src / "handler.py").write_text(textwrap.dedent(source), encoding="utf-8")
    (src / "model-config.yaml").write_text(textwrap.dedent(config), encoding="utf-8")
    return archive_model(
        model_name="countdown",
        handler=src / "handler.py",
        export_path=tmp_path / "store",
        config_file=src / "model-config.yaml",
        archive_format="no-archive",
        force=True,
    )


def gen(tag: str, n: int) -> Generation:
    return Generation({"tag": tag, "n": n}, FakeRequest({"content-type": "application/json"}))


async def run_step(inst: Any, batch: list[Generation]) -> dict[str, list[Any]]:
    """One step as the scheduler runs it: each request's items, ``first`` turned off."""
    await inst.step(batch)
    got = {}
    for g in batch:
        got[g.inputs["tag"]] = g.take()
        g.first = False
    return got


def test_continuous_batching_maps_onto_the_config() -> None:
    config = model_config(
        {"continuousBatching": True, "batchSize": 8}, name="m", version=None, where="x"
    )
    assert config.continuous_batching is True and config.batch_size == 8
    with pytest.raises(DefinitionError, match="'continuousBatching' must be true or false"):
        model_config({"continuousBatching": "yes"}, name="m", version=None, where="x")
    with pytest.raises(DefinitionError, match="'useJobTicket' is not supported yet"):
        model_config({"useJobTicket": True}, name="m", version=None, where="x")


@pytest.mark.anyio
async def test_the_instance_is_continuous(tmp_path: Path, executor: ThreadPoolExecutor) -> None:
    inst = await load(handler_model(tmp_path, COUNTDOWN), executor)
    assert inst.capabilities.continuous is True and inst.capabilities.streaming is True
    plain = await load(handler_model(tmp_path / "plain", ONE_SHOT, "batchSize: 4\n"), executor)
    assert plain.capabilities.continuous is False


@pytest.mark.anyio
async def test_steps_keep_request_ids_and_cache_and_finish_by_stopping_criteria(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    inst = await load(handler_model(tmp_path, COUNTDOWN), executor)
    handler = inst._entry.__self__
    a = gen("a", 3)
    got = await run_step(inst, [a])
    assert got == {"a": ["a:2"]} and not a.finished
    b = gen("b", 1)  # joins the running batch
    got = await run_step(inst, [a, b])
    assert got == {"a": ["a:1"], "b": ["b:0"]}
    assert not a.finished and b.finished
    got = await run_step(inst, [a])
    assert got == {"a": ["a:0"]} and a.finished

    calls = handler.calls
    assert [len(c) for c in calls] == [1, 2, 1]
    a_id, b_id = calls[0][0][0], calls[1][1][0]
    assert a_id != b_id
    assert [c[0][0] for c in calls] == [a_id, a_id, a_id]  # the same id on every step
    # the data row on the first step only; later steps send an empty row, as TorchServe does
    assert calls[0][0][1] == {"body": {"tag": "a", "n": 3}}
    assert calls[1][0][1] == {} and calls[1][1][1] == {"body": {"tag": "b", "n": 1}}
    assert calls[2][0][1] == {}
    assert inst.context.cache == {}  # the handler's criteria cleaned up


@pytest.mark.anyio
async def test_intermediate_responses_and_the_return_value_are_items(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    inst = await load(handler_model(tmp_path, COUNTDOWN), executor)
    solo = gen("chatty-solo", 2)
    got = await run_step(inst, [solo])
    assert got == {"chatty-solo": ["chatty-solo:pre", "chatty-solo:1"]}
    quiet = gen("quiet", 2)
    got = await run_step(inst, [solo, quiet])
    assert got == {"chatty-solo": ["chatty-solo:pre", "chatty-solo:0"], "quiet": ["quiet:1"]}
    assert solo.finished and not quiet.finished


@pytest.mark.anyio
async def test_without_stopping_criteria_a_request_ends_after_one_step(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    inst = await load(handler_model(tmp_path, ONE_SHOT), executor)
    a, b = gen("a", 1), gen("b", 1)
    await inst.step([a, b])
    assert a.take() == [{"echo": {"tag": "a", "n": 1}}] and a.finished
    assert b.take() == [{"echo": {"tag": "b", "n": 1}}] and b.finished


BOOLS = """
def handle(data, context):
    if data is None:
        return None
    ids = context.request_ids
    for idx in ids:
        context.cache[ids[idx]] = context.cache.get(ids[idx], 0) + 1
    # a dict keyed by request id, with plain bools
    context.stopping_criteria = {ids[i]: context.cache[ids[i]] >= 2 for i in ids}
    return [context.cache[ids[i]] for i in ids]
"""

FAILING = """
def handle(data, context):
    if data is None:
        return None
    raise ValueError("boom")
"""


@pytest.mark.anyio
async def test_stopping_criteria_as_bools_by_request_id(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    inst = await load(handler_model(tmp_path, BOOLS), executor)
    a = gen("a", 0)
    await inst.step([a])
    assert a.take() == [1] and not a.finished
    await inst.step([a])
    assert a.take() == [2] and a.finished


@pytest.mark.anyio
async def test_a_failing_handler_fails_the_step(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    inst = await load(handler_model(tmp_path, FAILING), executor)
    with pytest.raises(ModelError, match="ValueError: boom"):
        await inst.step([gen("a", 1)])


@pytest.mark.anyio
async def test_continuous_with_sequences_steps_unless_the_handler_streams_itself(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    """With sequenceBatching, a handler that does not call send_intermediate_predict_response is
    stepped as TorchServe's sequence continuous batching steps it (the sequence scheduler runs
    each worker's step loop: ``continuous``); one that does runs one call per request, several
    at once, so that a cancel can overlap a stream (``continuous`` false, ``streaming``)."""
    from podium.model.discovery import discover

    both = "continuousBatching: true\nsequenceBatching: true\n"
    model = handler_model(tmp_path / "one", ONE_SHOT, both)
    (source,) = discover(model)
    assert source.config.sequence_batching and source.config.continuous_batching
    assert source.config.predict_concurrency >= 2
    inst = await load(model, executor)
    assert inst.capabilities.continuous and inst.capabilities.streaming
    chatty = await load(handler_model(tmp_path / "chatty", COUNTDOWN, both), executor)
    assert not chatty.capabilities.continuous and chatty.capabilities.streaming


@pytest.mark.anyio
@pytest.mark.parametrize("workers", ["thread", "process"])
async def test_the_scheduler_steps_a_handler_in_either_kind_of_worker(
    tmp_path: Path, executor: ThreadPoolExecutor, workers: str
) -> None:
    """Through the continuous scheduler: the handler in the server's threads, or in a worker
    process (the steps cross, runtime/process/_steps.py), with the same items."""
    from podium.model.discovery import discover
    from podium.runtime.loading import build_version

    config = CONFIG + f"podium:\n  workers: {workers}\n"
    (source,) = discover(handler_model(tmp_path, COUNTDOWN, config))
    mv = build_version(source, secrets={}, executor=executor)
    await mv.pool.start()  # type: ignore[union-attr]
    try:
        a, chatty = await asyncio.gather(
            mv.scheduler.infer({"tag": "a", "n": 3}, None),
            mv.scheduler.infer({"tag": "chatty", "n": 2}, None),
        )
    finally:
        await mv.scheduler.close()
    assert a == ["a:2", "a:1", "a:0"]
    assert chatty == ["chatty:pre", "chatty:1", "chatty:pre", "chatty:0"]
