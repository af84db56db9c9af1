"""What each scheduler and worker records in its version's counters (runtime/_stats): queue,
preprocess, predict and postprocess times, batches, continuous steps, sequence ends by reason,
restarts, the load time, and the model's own metrics created while it is built and loaded."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from helpers import ManualClock, wait_until

from podium.errors import ResponseTimeout
from podium.model.discovery import discover_all
from podium.runtime import RestartReason, SequenceEnd
from podium.runtime import workers as workers_module
from podium.runtime.batcher import BatchScheduler
from podium.runtime.loading import build_version
from podium.runtime.registry import ModelVersion
from podium.runtime.sequences import SequenceScheduler
from podium.types import SequenceRef

pytestmark = pytest.mark.anyio

PIPELINE = """
import asyncio
from podium import metrics
IMPORTED = metrics.counter("imported")
IMPORTED.inc()
class Model:
    def __init__(self):
        self.made = metrics.counter("made")
        self.made.inc()
    def load(self):
        self.seen = metrics.counter("seen", labelnames=["kind"])
    async def preprocess(self, inputs):
        await asyncio.sleep(0.002)
        return inputs
    async def predict(self, inputs):
        self.seen.labels(kind="x").inc()
        await asyncio.sleep(inputs.get("sleep", 0.002))
        return inputs
    async def postprocess(self, outputs):
        return outputs
"""

BATCHED = """
class Model:
    async def predict(self, batch):
        return [x * 2 for x in batch]
"""

SEQUENCE = """
from podium import Context
class Model:
    async def predict(self, inputs, context: Context):
        if inputs.get("end"):
            context.end()
        return inputs
"""

STEPS = """
class Model:
    async def step(self, batch):
        for g in batch:
            g.emit(1)
            g.finish()
"""

STUCK = """
import threading
RELEASE = threading.Event()
class Model:
    def predict(self, inputs):
        if inputs == "stuck":
            RELEASE.wait(10)
        return inputs
"""


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(8, thread_name_prefix="test-stats") as pool:
        yield pool


def version_from(
    tmp_path: Path, code: str, config: str, executor: ThreadPoolExecutor
) -> ModelVersion:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.py").write_text(code)
    (folder / "config.yaml").write_text(config or "{}\n")
    found, problems = discover_all(folder)
    assert not problems
    return build_version(found[0], secrets={}, executor=executor)


def custom(mv: ModelVersion) -> dict[str, dict[tuple[str, ...], object]]:
    return {f.name: dict(series) for f, series in mv.stats.custom.collect()}


async def test_direct_scheduling_records_each_part_and_the_models_own_metrics(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    mv = version_from(tmp_path, PIPELINE, "predict_concurrency: 1\n", executor)
    await mv.load()
    try:
        stats = mv.stats
        assert stats.load_ns > 0
        # two at once on one slot: the second waits for the first's predict
        await asyncio.gather(
            mv.scheduler.infer({"sleep": 0.05}, None), mv.scheduler.infer({"sleep": 0}, None)
        )
        assert stats.compute_input.count == 2 and stats.compute_input.ns > 0
        assert stats.compute_output.count == 2
        assert stats.execution_count == 2 and stats.infer_count == 2
        assert stats.predict.ns >= 50_000_000
        queue = stats.queue_durations()
        assert queue.count == 2 and queue.ns > 0  # one took the slot at once, one waited
        assert stats.unqueued == 1
        assert custom(mv) == {"imported": {(): 1.0}, "made": {(): 1.0}, "seen": {("x",): 2.0}}
    finally:
        await mv.close()


async def test_a_batch_is_one_execution_and_each_request_waited_in_the_queue(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    mv = version_from(tmp_path, BATCHED, "batch_size: 3\nmax_batch_delay: 100\n", executor)
    clock = ManualClock()
    assert mv.pool is not None
    mv.scheduler = BatchScheduler(
        mv.pool,
        model="m",
        batch_size=3,
        max_batch_delay_ms=100,
        max_queue_size=10,
        concurrency=1,
        clock=clock,
    )
    await mv.load()
    try:
        first = asyncio.ensure_future(mv.scheduler.infer(1, None))
        await asyncio.sleep(0)
        clock.advance(0.0625)  # within max_batch_delay: the next two fill the batch
        rest = [asyncio.ensure_future(mv.scheduler.infer(x, None)) for x in (2, 3)]
        assert await asyncio.gather(first, *rest) == [2, 4, 6]
        stats = mv.stats
        assert stats.execution_count == 1 and stats.infer_count == 3
        ((size, (count, ns)),) = stats.by_size().items()
        assert (size, count) == (3, 1)
        assert stats.infer_count == 3 and stats.infer_ns == 3 * ns
        queue = stats.queue_durations()
        assert queue.count == 3 and queue.ns == 62_500_000  # the first waited 62.5 ms
    finally:
        await mv.close()


async def test_sequences_are_counted_by_how_they_ended(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    config = "sequence_batching: true\nsequence_max_idle_ms: 125\nsequence_timeout_ms: 1000\n"
    mv = version_from(tmp_path, SEQUENCE, config, executor)
    clock = ManualClock()
    assert mv.pool is not None
    scheduler = mv.scheduler = SequenceScheduler(mv.pool, config=mv.config, clock=clock)
    await mv.load()
    try:
        await scheduler.infer_in(SequenceRef(id="a", end=True), {}, None)
        await scheduler.infer_in(SequenceRef(id="b"), {"end": True}, None)
        await scheduler.infer_in(SequenceRef(id="c"), {}, None)
        clock.advance(0.125)  # c is idle too long
        await scheduler.infer_in(SequenceRef(id="d"), {}, None)
        for _ in range(9):  # d stays busy, near its absolute timeout
            clock.advance(0.1)
            await scheduler.infer_in(SequenceRef(id="d"), {}, None)
        clock.advance(0.125)
        assert mv.stats.sequences_ended == {
            SequenceEnd.REQUEST: 1,
            SequenceEnd.MODEL: 1,
            SequenceEnd.IDLE: 1,
            SequenceEnd.TIMEOUT: 1,
        }
    finally:
        await mv.close()


async def test_a_continuous_batch_counts_its_steps_and_each_request(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    mv = version_from(tmp_path, STEPS, "continuous_batching: true\nbatch_size: 4\n", executor)
    await mv.load()
    try:
        items = [item async for item in mv.scheduler.stream({}, None)]
        assert items == [1]
        stats = mv.stats
        assert stats.steps == 1 and stats.execution_count == 1
        assert stats.infer_count == 1
        assert stats.queue_durations().count == 1
    finally:
        await mv.close()


async def test_a_stuck_thread_worker_is_counted_as_a_restart(
    tmp_path: Path, executor: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workers_module, "STUCK_GRACE", 0.01)
    mv = version_from(tmp_path, STUCK, "response_timeout: 0.05\n", executor)
    await mv.load()
    module = __import__(type(mv.instance.obj).__module__)  # type: ignore[attr-defined]
    try:
        with pytest.raises(ResponseTimeout):
            await mv.scheduler.infer("stuck", None)
        await wait_until(lambda: mv.stats.restarts == {RestartReason.RESPONSE_TIMEOUT: 1})
    finally:
        module.RELEASE.set()
        await mv.close()
