"""Stateful sequences: podium.runtime.sequences (SequenceScheduler) over thread workers.

Order, state, ends, limits, timeouts, batching, pinning, cancellation and worker loss, judged by
what happened. The models read their Context through ``podium.types.current_context``.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from helpers import ManualClock, wait_until

from podium.errors import (
    DefinitionError,
    InvalidInput,
    ResponseTimeout,
    SequenceClosed,
    SequenceLimit,
    Unavailable,
    http_status,
)
from podium.model.discovery import discover_all
from podium.runtime import workers as workers_module
from podium.runtime.loading import build_version
from podium.runtime.registry import ModelVersion
from podium.runtime.sequences import SequenceScheduler
from podium.types import SequenceRef, current_context

SUM = """
import asyncio
from podium.types import current_context
SEEN = []
GATE = asyncio.Event()
GATE.set()
class Model:
    async def predict(self, inputs):
        ctx = current_context.get()
        SEEN.append((ctx.sequence_id, inputs["x"]))
        if inputs.get("hold"):
            await GATE.wait()
        await asyncio.sleep(inputs.get("sleep", 0))
        ctx.state["sum"] = ctx.state.get("sum", 0) + inputs["x"]
        if inputs.get("end"):
            ctx.end()
        return {"sum": ctx.state["sum"], "first": ctx.first, "worker": id(self)}
"""

BATCHED = """
import asyncio
from podium.types import current_context
BATCHES = []
class Model:
    async def predict(self, inputs):
        contexts = current_context.get()
        BATCHES.append([c.sequence_id for c in contexts])
        out = []
        for ctx, x in zip(contexts, inputs):
            ctx.state["sum"] = ctx.state.get("sum", 0) + x
            out.append(ctx.state["sum"])
        return out
"""

STREAM = """
import asyncio
from podium.types import current_context
EVENTS = []
class Model:
    async def predict(self, inputs):
        ctx = current_context.get()
        EVENTS.append(("start", inputs["n"]))
        for _ in range(inputs["n"]):
            await asyncio.sleep(0.001)
            ctx.state["count"] = ctx.state.get("count", 0) + 1
            yield ctx.state["count"]
        EVENTS.append(("end", inputs["n"]))
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

SEQ = "sequence_batching: true\n"


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(16, thread_name_prefix="test-seq") as pool:
        yield pool


def version_from(
    tmp_path: Path,
    code: str,
    config: str,
    executor: ThreadPoolExecutor,
    clock: ManualClock | None = None,
) -> ModelVersion:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.py").write_text(code)
    (folder / "config.yaml").write_text(config)
    found, problems = discover_all(folder)
    assert not problems
    mv = build_version(found[0], secrets={}, executor=executor)
    if clock is not None:  # the same scheduler, timed by a clock the test moves
        assert mv.pool is not None
        mv.scheduler = SequenceScheduler(mv.pool, config=mv.config, clock=clock)
    return mv


def model_module(mv: ModelVersion) -> Any:
    obj = mv.instance.obj  # type: ignore[attr-defined]
    return sys.modules[type(obj).__module__]


def sched(mv: ModelVersion) -> SequenceScheduler:
    assert isinstance(mv.scheduler, SequenceScheduler)
    return mv.scheduler


async def send(mv: ModelVersion, sid: str | None, x: int, **extra: Any) -> Any:
    end = extra.pop("end_request", False)
    return await sched(mv).infer_in(SequenceRef(id=sid, end=end), {"x": x, **extra}, None)


# -- order and state -----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_interleaved_sequences_keep_their_own_state_in_arrival_order(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    mv = version_from(
        tmp_path, SUM, SEQ + "max_sequence_queue_size: 10\npredict_concurrency: 12\n", executor
    )
    await mv.load()
    try:
        calls: dict[str, list[asyncio.Future[Any]]] = {"a": [], "b": [], "c": []}
        for step in range(1, 5):  # a1 b1 c1 a2 b2 c2 ... from concurrent callers
            for n, sid in enumerate(calls):
                # later requests sleep less: only the scheduler keeps them in order
                extra = {"sleep": 0.004 * (5 - step) * (n + 1) / 3}
                calls[sid].append(asyncio.ensure_future(send(mv, sid, step * 10 + n, **extra)))
        for n, (sid, futures) in enumerate(calls.items()):
            results = [await f for f in futures]
            xs = [step * 10 + n for step in range(1, 5)]
            assert [r["sum"] for r in results] == [sum(xs[: i + 1]) for i in range(4)]
            assert [r["first"] for r in results] == [True, False, False, False]
            seen = [x for s, x in model_module(mv).SEEN if s == sid]
            assert seen == xs
        assert current_context.get() is None  # nothing leaks into the caller
        assert sched(mv).statistics()["sequences"] == 3
    finally:
        await mv.close()


@pytest.mark.anyio
async def test_a_server_made_id_comes_back_and_continues_the_sequence(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    mv = version_from(tmp_path, SUM, SEQ, executor)
    await mv.load()
    try:
        ref = SequenceRef()
        assert (await sched(mv).infer_in(ref, {"x": 5}, None))["sum"] == 5
        assert ref.id and ref.created and not ref.ended
        again = SequenceRef(id=ref.id)
        result = await sched(mv).infer_in(again, {"x": 2}, None)
        assert result == {"sum": 7, "first": False, "worker": result["worker"]}
        assert not again.created
        # infer() without a ref starts a sequence of its own each time
        assert (await sched(mv).infer({"x": 1}, None))["first"] is True
        assert sched(mv).statistics()["sequences"] == 2
    finally:
        await mv.close()


@pytest.mark.anyio
async def test_a_client_chosen_id_starts_a_sequence(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    mv = version_from(tmp_path, SUM, SEQ, executor)
    await mv.load()
    try:
        ref = SequenceRef(id="mine")
        assert (await sched(mv).infer_in(ref, {"x": 3}, None))["first"] is True
        assert ref.id == "mine" and not ref.created
        assert (await send(mv, "mine", 4))["sum"] == 7
    finally:
        await mv.close()


@pytest.mark.anyio
async def test_each_sequence_stays_on_the_worker_it_was_pinned_to(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    mv = version_from(
        tmp_path,
        SUM,
        SEQ + "min_workers: 2\nmax_workers: 2\nmax_sequence_queue_size: 5\n",
        executor,
    )
    await mv.load()
    try:
        sids = ["s1", "s2", "s3", "s4"]
        futures = {
            sid: [asyncio.ensure_future(send(mv, sid, i, sleep=0.002)) for i in range(3)]
            for sid in sids
        }
        workers: dict[str, set[int]] = {}
        for sid in sids:
            workers[sid] = {(await f)["worker"] for f in futures[sid]}
        assert all(len(w) == 1 for w in workers.values())
        # each new sequence went to the worker holding the fewest: two on each
        placed = [next(iter(workers[sid])) for sid in sids]
        assert len(set(placed)) == 2 and placed[0] == placed[2] and placed[1] == placed[3]
    finally:
        await mv.close()


# -- ends and the memory of ended ids -----------------------------------------------------------


@pytest.mark.anyio
async def test_a_request_that_says_end_ends_the_sequence_and_the_id_is_refused_after(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    mv = version_from(tmp_path, SUM, SEQ, executor)
    await mv.load()
    try:
        await send(mv, "s", 1)
        ref = SequenceRef(id="s", end=True)
        assert (await sched(mv).infer_in(ref, {"x": 2}, None))["sum"] == 3
        assert ref.ended
        assert sched(mv).statistics()["sequences"] == 0
        with pytest.raises(SequenceClosed, match="sequence 's' is closed: ended by a request") as e:
            await send(mv, "s", 1)
        assert http_status(e.value) == 410
        assert model_module(mv).SEEN == [("s", 1), ("s", 2)]  # never started again
    finally:
        await mv.close()


@pytest.mark.anyio
async def test_a_model_that_ends_the_sequence_ends_it(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    mv = version_from(tmp_path, SUM, SEQ, executor)
    await mv.load()
    try:
        ref = SequenceRef(id="s")
        await sched(mv).infer_in(ref, {"x": 1, "end": True}, None)
        assert ref.ended
        with pytest.raises(SequenceClosed, match="ended by the model"):
            await send(mv, "s", 1)
    finally:
        await mv.close()


@pytest.mark.anyio
async def test_requests_waiting_on_a_sequence_that_ends_get_sequence_closed(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    mv = version_from(tmp_path, SUM, SEQ + "max_sequence_queue_size: 3\n", executor)
    await mv.load()
    module = model_module(mv)
    module.GATE.clear()
    try:
        first = asyncio.ensure_future(
            sched(mv).infer_in(SequenceRef(id="s", end=True), {"x": 1, "hold": True}, None)
        )
        await wait_until(lambda: len(module.SEEN) == 1)
        later = asyncio.ensure_future(send(mv, "s", 2))
        await wait_until(lambda: sched(mv).statistics()["queued"] == 1)
        module.GATE.set()
        assert (await first)["sum"] == 1
        with pytest.raises(SequenceClosed, match="ended by a request"):
            await later
        assert module.SEEN == [("s", 1)]
    finally:
        module.GATE.set()
        await mv.close()


@pytest.mark.anyio
async def test_an_idle_sequence_expires_and_its_id_says_so(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    clock = ManualClock()  # 125 ms: sweeps every 31.25 ms, all binary-exact
    mv = version_from(tmp_path, SUM, SEQ + "sequence_max_idle_ms: 125\n", executor, clock)
    await mv.load()
    try:
        await send(mv, "s", 1)
        clock.advance(0.09375)
        assert (await send(mv, "s", 1))["sum"] == 2  # in time: the idle clock starts again
        clock.advance(0.09375)
        assert sched(mv).statistics()["sequences"] == 1  # idle 93.75 ms
        clock.advance(0.03125)
        assert sched(mv).statistics()["sequences"] == 0  # idle 125 ms: the sweep ended it
        with pytest.raises(
            SequenceClosed, match=r"idle for more than sequence_max_idle_ms \(125 ms\)"
        ):
            await send(mv, "s", 1)
    finally:
        await mv.close()


@pytest.mark.anyio
async def test_a_request_for_an_idle_sequence_the_sweep_has_not_reached_is_refused(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    clock = ManualClock()
    mv = version_from(tmp_path, SUM, SEQ + "sequence_max_idle_ms: 125\n", executor, clock)
    await mv.load()
    try:
        await send(mv, "t", 1)  # starts the sweeps: every 31.25 ms from now
        clock.advance(1 / 1024)
        await send(mv, "s", 1)  # idle from here, out of step with the sweeps
        clock.advance(0.125 - 1 / 1024)  # a sweep: t is idle for 125 ms, s not quite
        assert sched(mv).statistics()["sequences"] == 1
        clock.advance(1 / 1024)  # s is idle for exactly 125 ms; no sweep since
        assert sched(mv).statistics()["sequences"] == 1
        with pytest.raises(SequenceClosed, match="idle for more than sequence_max_idle_ms"):
            await send(mv, "s", 1)
        assert sched(mv).statistics()["sequences"] == 0
    finally:
        await mv.close()


@pytest.mark.anyio
async def test_a_sequence_older_than_its_timeout_expires_even_while_busy(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    clock = ManualClock()
    config = SEQ + "sequence_timeout_ms: 125\nsequence_max_idle_ms: 0\n"
    mv = version_from(tmp_path, SUM, config, executor, clock)
    await mv.load()
    module = model_module(mv)
    try:
        module.GATE.clear()
        ref = SequenceRef(id="s")
        running = asyncio.ensure_future(sched(mv).infer_in(ref, {"x": 1, "hold": True}, None))
        waiting = asyncio.ensure_future(send(mv, "s", 2))
        await wait_until(lambda: sched(mv).statistics()["queued"] == 1)
        clock.advance(0.09375)
        await asyncio.sleep(0)
        assert not waiting.done()
        clock.advance(0.03125)
        with pytest.raises(SequenceClosed, match=r"older than sequence_timeout_ms \(125 ms\)"):
            await waiting  # the sweep closed it while its first request still ran
        module.GATE.set()
        assert (await running)["sum"] == 1  # the running request finished
        assert ref.ended
        with pytest.raises(SequenceClosed, match="older than sequence_timeout_ms"):
            await send(mv, "s", 3)
        assert sched(mv).statistics()["sequences"] == 0
    finally:
        module.GATE.set()
        await mv.close()


@pytest.mark.anyio
async def test_ended_ids_are_remembered_in_a_bounded_lru(
    tmp_path: Path, executor: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    from podium.runtime.sequences import _scheduler

    monkeypatch.setattr(_scheduler, "CLOSED_IDS", 2)
    mv = version_from(tmp_path, SUM, SEQ, executor)
    await mv.load()
    try:
        for sid in ("a", "b", "c"):
            await sched(mv).infer_in(SequenceRef(id=sid, end=True), {"x": 1}, None)
        for sid in ("b", "c"):
            with pytest.raises(SequenceClosed):
                await send(mv, sid, 1)
        assert (await send(mv, "a", 1))["first"] is True  # forgotten: a new sequence
    finally:
        await mv.close()


# -- limits -------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_full_sequence_queue_is_refused_at_once_and_disturbs_nothing(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    config = SEQ + "predict_concurrency: 2\nmax_sequence_queue_size: 1\n"
    mv = version_from(tmp_path, SUM, config, executor)
    await mv.load()
    module = model_module(mv)
    module.GATE.clear()
    try:
        running = asyncio.ensure_future(send(mv, "s", 1, hold=True))
        await wait_until(lambda: len(module.SEEN) == 1)
        waiting = asyncio.ensure_future(send(mv, "s", 2))
        await wait_until(lambda: sched(mv).statistics()["queued"] == 1)
        with pytest.raises(SequenceLimit, match="sequence 's'.*max_sequence_queue_size 1") as e:
            await send(mv, "s", 100)
        assert http_status(e.value) == 503
        assert (await send(mv, "other", 7))["sum"] == 7  # another sequence runs meanwhile
        module.GATE.set()
        assert [(await running)["sum"], (await waiting)["sum"]] == [1, 3]
        assert (await send(mv, "s", 4))["sum"] == 7  # the refused request never ran
    finally:
        module.GATE.set()
        await mv.close()


@pytest.mark.anyio
async def test_too_many_open_sequences_are_refused_until_one_ends(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    mv = version_from(tmp_path, SUM, SEQ + "max_num_sequences: 2\n", executor)
    await mv.load()
    try:
        await send(mv, "a", 1)
        await send(mv, "b", 1)
        with pytest.raises(SequenceLimit, match=r"2 open sequences \(max_num_sequences 2\)"):
            await send(mv, "c", 1)
        with pytest.raises(SequenceLimit):
            await sched(mv).infer({"x": 1}, None)  # no id: a new sequence too
        assert (await send(mv, "a", 1))["sum"] == 2  # open ones carry on
        await sched(mv).infer_in(SequenceRef(id="a", end=True), {"x": 1}, None)
        assert (await send(mv, "c", 5))["sum"] == 5
    finally:
        await mv.close()


@pytest.mark.anyio
async def test_the_default_limits_let_a_real_service_live(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    """Anonymous calls (a new sequence each, never sent back) do not lock new sequences out:
    10,000 may be open at once by default; 0 is no limit."""
    mv = version_from(tmp_path, SUM, SEQ, executor)
    assert (mv.config.max_num_sequences, mv.config.max_sequence_queue_size) == (10_000, 16)
    await mv.load()
    try:
        for _ in range(200):
            await sched(mv).infer({"x": 1}, None)
        assert (await send(mv, "mine", 1))["first"] is True
        assert sched(mv).statistics()["sequences"] == 201
    finally:
        await mv.close()
    (tmp_path / "unlimited").mkdir()
    mv = version_from(tmp_path / "unlimited", SUM, SEQ + "max_num_sequences: 0\n", executor)
    await mv.load()
    try:
        for n in range(300):
            await send(mv, f"s{n}", 1)
        assert sched(mv).statistics()["sequences"] == 300
    finally:
        await mv.close()


# -- batching -------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_batch_takes_at_most_one_request_per_sequence(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    config = SEQ + "batch_size: 4\nmax_batch_delay: 20\nmax_sequence_queue_size: 5\n"
    mv = version_from(tmp_path, BATCHED, config, executor)
    await mv.load()
    try:
        plan = ["a", "a", "a", "b", "b", "c"]
        futures = [
            (sid, asyncio.ensure_future(sched(mv).infer_in(SequenceRef(id=sid), n + 1, None)))
            for n, sid in enumerate(plan)
        ]
        sums: dict[str, list[int]] = {}
        for sid, future in futures:
            sums.setdefault(sid, []).append(await future)
        assert sums == {"a": [1, 3, 6], "b": [4, 9], "c": [6]}
        batches = model_module(mv).BATCHES
        assert batches[0] == ["a", "b", "c"]  # the first of each, together
        assert all(len(b) == len(set(b)) for b in batches)
        assert sorted(s for b in batches for s in b) == sorted(plan)
        assert sched(mv).statistics()["batches"] == len(batches) == 3
    finally:
        await mv.close()


@pytest.mark.anyio
async def test_a_batch_of_sequences_closes_max_batch_delay_after_its_first_request(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    clock = ManualClock()
    config = SEQ + "batch_size: 4\nmax_batch_delay: 125\n"
    mv = version_from(tmp_path, BATCHED, config, executor, clock)
    await mv.load()
    try:
        first = asyncio.ensure_future(sched(mv).infer_in(SequenceRef(id="a"), 1, None))
        await wait_until(lambda: sched(mv).statistics()["queued"] == 1)
        clock.advance(0.0625)
        second = asyncio.ensure_future(sched(mv).infer_in(SequenceRef(id="b"), 2, None))
        await wait_until(lambda: sched(mv).statistics()["queued"] == 2)
        clock.advance(0.0625 - 1 / 1024)
        await asyncio.sleep(0.01)
        assert model_module(mv).BATCHES == [] and not first.done()
        clock.advance(1 / 1024)  # 125 ms after the first request, not the second
        assert await asyncio.wait_for(asyncio.gather(first, second), 2) == [1, 2]
        assert model_module(mv).BATCHES == [["a", "b"]]
    finally:
        await mv.close()


# -- cancellation, streams, worker loss, close ---------------------------------------------------


@pytest.mark.anyio
async def test_a_cancelled_waiting_request_leaves_its_sequence_without_running(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    mv = version_from(tmp_path, SUM, SEQ + "max_sequence_queue_size: 2\n", executor)
    await mv.load()
    module = model_module(mv)
    module.GATE.clear()
    try:
        running = asyncio.ensure_future(send(mv, "s", 1, hold=True))
        await wait_until(lambda: len(module.SEEN) == 1)
        doomed = asyncio.ensure_future(send(mv, "s", 100))
        after = asyncio.ensure_future(send(mv, "s", 2))
        await wait_until(lambda: sched(mv).statistics()["queued"] == 2)
        doomed.cancel()
        with pytest.raises(asyncio.CancelledError):
            await doomed
        module.GATE.set()
        assert [(await running)["sum"], (await after)["sum"]] == [1, 3]
        assert module.SEEN == [("s", 1), ("s", 2)]
    finally:
        module.GATE.set()
        await mv.close()


@pytest.mark.anyio
async def test_a_cancelled_running_request_frees_the_sequence_for_the_next(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    mv = version_from(tmp_path, SUM, SEQ, executor)
    await mv.load()
    module = model_module(mv)
    module.GATE.clear()
    try:
        running = asyncio.ensure_future(send(mv, "s", 1, hold=True))
        await wait_until(lambda: len(module.SEEN) == 1)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        assert (await send(mv, "s", 2))["sum"] == 2  # the cancelled one added nothing
        assert mv.statistics()["busy"] == 0
    finally:
        module.GATE.set()
        await mv.close()


@pytest.mark.anyio
async def test_a_streaming_sequence_runs_its_next_request_after_the_stream_ends(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    mv = version_from(
        tmp_path, STREAM, SEQ + "max_sequence_queue_size: 2\npredict_concurrency: 2\n", executor
    )
    await mv.load()
    try:

        async def items(n: int) -> list[int]:
            stream = sched(mv).stream_in(SequenceRef(id="s"), {"n": n}, None)
            return [item async for item in stream]

        first, second = await asyncio.gather(items(3), items(2))
        assert first == [1, 2, 3] and second == [4, 5]
        assert model_module(mv).EVENTS == [("start", 3), ("end", 3), ("start", 2), ("end", 2)]
        assert current_context.get() is None
        # the gathering path (infer_in on a streaming model is the data plane's job): stream()
        assert [i async for i in sched(mv).stream({"n": 1}, None)] == [1]
    finally:
        await mv.close()


@pytest.mark.anyio
async def test_a_replaced_thread_worker_loses_its_sequences_and_the_others_continue(
    tmp_path: Path, executor: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workers_module, "STUCK_GRACE", 0.01)
    config = SEQ + "min_workers: 2\nmax_workers: 2\nresponse_timeout: 0.05\n"
    config += "max_sequence_queue_size: 2\n"
    mv = version_from(tmp_path, STUCK, config, executor)
    await mv.load()
    module = model_module(mv)
    try:
        assert await sched(mv).infer_in(SequenceRef(id="a"), "one", None) == "one"  # worker 1
        assert await sched(mv).infer_in(SequenceRef(id="b"), "one", None) == "one"  # worker 2
        stuck = asyncio.ensure_future(sched(mv).infer_in(SequenceRef(id="a"), "stuck", None))
        queued = asyncio.ensure_future(sched(mv).infer_in(SequenceRef(id="a"), "next", None))
        with pytest.raises(ResponseTimeout):
            await stuck
        lost = "its state was lost when worker 1 died"
        with pytest.raises(SequenceClosed, match=lost):
            await queued  # it waited for worker 1's slot, held by the stuck call
        with pytest.raises(SequenceClosed, match=lost):
            await sched(mv).infer_in(SequenceRef(id="a"), "again", None)
        assert await sched(mv).infer_in(SequenceRef(id="b"), "two", None) == "two"
        # a new sequence goes to the replacement, never to the stuck worker
        await wait_until(lambda: [w.state for w in mv.workers()].count("ready") == 2)
        assert await sched(mv).infer_in(SequenceRef(id="c"), "one", None) == "one"
    finally:
        module.RELEASE.set()
        await mv.close()


@pytest.mark.anyio
async def test_scaling_down_closes_the_sequences_of_the_retired_worker(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    mv = version_from(tmp_path, SUM, SEQ + "min_workers: 2\nmax_workers: 2\n", executor)
    await mv.load()
    try:
        kept = (await send(mv, "a", 1))["worker"]
        assert (await send(mv, "b", 1))["worker"] != kept
        await mv.scale(1)  # the newest idle worker (2, holding b) goes
        with pytest.raises(SequenceClosed, match="lost when worker 2 was stopped"):
            await send(mv, "b", 1)
        assert (await send(mv, "a", 1)) == {"sum": 2, "first": False, "worker": kept}
    finally:
        await mv.close()


@pytest.mark.anyio
async def test_close_fails_waiting_requests_with_unavailable(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    mv = version_from(tmp_path, SUM, SEQ, executor)
    await mv.load()
    module = model_module(mv)
    module.GATE.clear()
    running = asyncio.ensure_future(send(mv, "s", 1, hold=True))
    try:
        await wait_until(lambda: len(module.SEEN) == 1)
        waiting = asyncio.ensure_future(send(mv, "s", 2))
        await wait_until(lambda: sched(mv).statistics()["queued"] == 1)
        await mv.close()
        with pytest.raises(Unavailable):
            await waiting
        with pytest.raises(Unavailable, match="stopped"):
            await send(mv, "t", 1)
    finally:
        module.GATE.set()
        await asyncio.gather(running, return_exceptions=True)


def test_process_workers_are_refused_for_sequences(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    with pytest.raises(DefinitionError, match="sequence_batching runs on thread workers"):
        version_from(tmp_path, SUM, SEQ + "workers: process\n", executor)


LAST = """
from podium.types import current_context
SEEN = []
class Model:
    async def predict(self, inputs):
        ctx = current_context.get()
        SEEN.append((inputs["x"], ctx.first, ctx.last))
        return inputs["x"]
"""


@pytest.mark.anyio
async def test_the_model_sees_which_request_the_client_ends_the_sequence_with(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    mv = version_from(tmp_path, LAST, SEQ, executor)
    await mv.load()
    try:
        await send(mv, "s", 1)
        await send(mv, "s", 2)
        await send(mv, "s", 3, end_request=True)
        assert model_module(mv).SEEN == [(1, True, False), (2, False, False), (3, False, True)]
    finally:
        await mv.close()


OVERLAP = """
import asyncio
from podium import Context
class Model:
    async def predict(self, inputs, context: Context):
        if inputs.get("cancel"):
            context.state["cancel"] = True
            yield "cancelled"
            return
        for i in range(inputs["n"]):
            if context.state.pop("cancel", False):
                yield "stopped"
                return
            await asyncio.sleep(0.01)
            yield i
"""


@pytest.mark.anyio
async def test_with_continuous_batching_a_later_request_runs_while_a_stream_runs(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    config = SEQ + "continuous_batching: true\npredict_concurrency: 4\n"
    mv = version_from(tmp_path, OVERLAP, config, executor)
    await mv.load()
    try:
        scheduler = sched(mv)
        long = scheduler.stream_in(SequenceRef(id="talk"), {"n": 1000}, None)
        got = [await anext(long)]  # the stream has started
        cancel = [i async for i in scheduler.stream_in(SequenceRef(id="talk"), {"cancel": 1}, None)]
        assert cancel == ["cancelled"]  # answered while the first stream still runs
        got += [i async for i in long]
        assert got[-1] == "stopped" and len(got) < 1000  # the cancel reached it
    finally:
        await mv.close()


@pytest.mark.anyio
async def test_overlapping_sequences_need_a_streaming_predict_and_room(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    config = SEQ + "continuous_batching: true\n"
    with pytest.raises(DefinitionError, match="predict_concurrency must be at least 2"):
        version_from(tmp_path, OVERLAP, config, executor)
    plain = "from podium import Context\nclass Model:\n    def predict(self, x, context: Context):\n        return x\n"
    (tmp_path / "m").rename(tmp_path / "m1")
    with pytest.raises(DefinitionError, match="predict must be a generator"):
        version_from(tmp_path, plain, config + "predict_concurrency: 2\n", executor)


# -- the start flag and the routes' rules (Triton's on OIP, TorchServe's elsewhere) ---------------


def ref(sid: str | None, *, start: bool = False, end: bool = False, oip: bool = False) -> Any:
    return SequenceRef(id=sid, start=start, end=end, needs_start=oip)


@pytest.mark.anyio
@pytest.mark.parametrize("oip", [True, False])
async def test_start_begins_a_fresh_sequence_on_an_ended_id(
    tmp_path: Path, executor: ThreadPoolExecutor, oip: bool
) -> None:
    """Triton's example clients reuse ids 1000 and 1001 run after run: each run starts them."""
    mv = version_from(tmp_path, SUM, SEQ, executor)
    await mv.load()
    try:
        for _ in range(3):
            first = await sched(mv).infer_in(ref("1000", start=True, oip=oip), {"x": 5}, None)
            assert (first["sum"], first["first"]) == (5, True)
            assert (await sched(mv).infer_in(ref("1000", oip=oip), {"x": 2}, None))["sum"] == 7
            last = ref("1000", end=True, oip=oip)
            assert (await sched(mv).infer_in(last, {"x": 1}, None))["sum"] == 8
            assert last.ended
        assert sched(mv).statistics()["sequences"] == 0
    finally:
        await mv.close()


@pytest.mark.anyio
async def test_start_on_a_live_id_ends_the_old_sequence_after_its_queued_requests(
    tmp_path: Path, executor: ThreadPoolExecutor, caplog: pytest.LogCaptureFixture
) -> None:
    """As Triton: the previous sequence's requests already queued run with its state, then the
    start request begins a new one (fresh state) and the requests after it continue that."""
    mv = version_from(tmp_path, SUM, SEQ + "max_sequence_queue_size: 4\n", executor)
    await mv.load()
    module = model_module(mv)
    module.GATE.clear()
    try:
        running = asyncio.ensure_future(send(mv, "s", 1, hold=True))
        await wait_until(lambda: len(module.SEEN) == 1)
        old = asyncio.ensure_future(send(mv, "s", 2))
        fresh = asyncio.ensure_future(sched(mv).infer_in(ref("s", start=True), {"x": 10}, None))
        after = asyncio.ensure_future(send(mv, "s", 20))
        await wait_until(lambda: sched(mv).statistics()["queued"] == 3)
        module.GATE.set()
        results = [await f for f in (running, old, fresh, after)]
        assert [r["sum"] for r in results] == [1, 3, 10, 30]
        assert [r["first"] for r in results] == [True, False, True, False]
        assert "had not ended when a request started a new one" in caplog.text
        assert sched(mv).statistics()["sequences"] == 1
    finally:
        module.GATE.set()
        await mv.close()


@pytest.mark.anyio
async def test_an_oip_request_without_start_needs_an_open_sequence(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    mv = version_from(tmp_path, SUM, SEQ, executor)
    await mv.load()
    try:
        with pytest.raises(InvalidInput) as caught:
            await sched(mv).infer_in(ref("1000", oip=True), {"x": 1}, None)
        assert http_status(caught.value) == 400
        assert str(caught.value).startswith(
            "inference request for sequence '1000' to model 'm' must specify the START flag "
            "on the first request of the sequence (no sequence with this id is open)"
        )
        await sched(mv).infer_in(ref("1000", start=True, oip=True), {"x": 1}, None)
        await sched(mv).infer_in(ref("1000", end=True, oip=True), {"x": 1}, None)
        with pytest.raises(InvalidInput, match=r"START flag .*\(it is closed: ended by a request"):
            await sched(mv).infer_in(ref("1000", oip=True), {"x": 1}, None)
        assert model_module(mv).SEEN == [("1000", 1), ("1000", 1)]
        # no id at all: a new sequence, whose id the server makes (a Podium extension)
        made = ref(None, oip=True)
        assert (await sched(mv).infer_in(made, {"x": 4}, None))["first"] is True
        assert made.created
    finally:
        await mv.close()


@pytest.mark.anyio
@pytest.mark.parametrize("oip", [True, False])
async def test_requests_queued_after_an_end_are_refused_and_a_start_among_them_begins_anew(
    tmp_path: Path, executor: ThreadPoolExecutor, oip: bool
) -> None:
    """A stream that ends sequence 1000 and starts it again at once: the end is answered, a
    stray request between is refused by the route's rule, the start begins a new sequence."""
    mv = version_from(tmp_path, SUM, SEQ + "max_sequence_queue_size: 4\n", executor)
    await mv.load()
    module = model_module(mv)
    module.GATE.clear()
    try:
        scheduler = sched(mv)
        first = asyncio.ensure_future(
            scheduler.infer_in(ref("1000", start=True, oip=oip), {"x": 1, "hold": True}, None)
        )
        await wait_until(lambda: len(module.SEEN) == 1)
        end = asyncio.ensure_future(
            scheduler.infer_in(ref("1000", end=True, oip=oip), {"x": 2}, None)
        )
        stray = asyncio.ensure_future(scheduler.infer_in(ref("1000", oip=oip), {"x": 100}, None))
        again = asyncio.ensure_future(
            scheduler.infer_in(ref("1000", start=True, oip=oip), {"x": 7}, None)
        )
        more = asyncio.ensure_future(scheduler.infer_in(ref("1000", oip=oip), {"x": 3}, None))
        await wait_until(lambda: scheduler.statistics()["queued"] == 4)
        module.GATE.set()
        assert [(await first)["sum"], (await end)["sum"]] == [1, 3]
        expected = InvalidInput if oip else SequenceClosed
        with pytest.raises(expected, match="ended by a request"):
            await stray
        assert [(await again)["sum"], (await more)["sum"]] == [7, 10]
        assert (await again)["first"] is True
        assert [x for _, x in module.SEEN] == [1, 2, 7, 3]  # the stray one never ran
    finally:
        module.GATE.set()
        await mv.close()


@pytest.mark.anyio
async def test_an_old_stream_ending_after_a_restart_does_not_end_the_new_sequence(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    """With continuous batching a stream of the old sequence may still run when a start
    request has begun the new one: its end belongs to the old sequence."""
    code = OVERLAP.replace(
        '        for i in range(inputs["n"]):',
        '        if inputs.get("end"):\n            context.end()\n'
        '        for i in range(inputs["n"]):',
    )
    config = SEQ + "continuous_batching: true\npredict_concurrency: 4\n"
    mv = version_from(tmp_path, code, config, executor)
    await mv.load()
    try:
        scheduler = sched(mv)
        old_ref = ref("talk")
        old = scheduler.stream_in(old_ref, {"n": 30, "end": True}, None)
        assert await anext(old) == 0  # started: the turn has passed on
        new_ref = ref("talk", start=True)
        assert [i async for i in scheduler.stream_in(new_ref, {"n": 2}, None)] == [0, 1]
        assert [i async for i in old][-1] == 29
        assert old_ref.ended and not new_ref.ended
        assert [i async for i in scheduler.stream_in(ref("talk"), {"n": 1}, None)] == [0]
    finally:
        await mv.close()


# -- back-pressure: waiting for room instead of a refusal ------------------------------------------


@pytest.mark.anyio
async def test_a_request_with_joined_waits_for_room_and_says_when_it_has_its_place(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    mv = version_from(tmp_path, SUM, SEQ + "max_sequence_queue_size: 1\n", executor)
    await mv.load()
    module = model_module(mv)
    module.GATE.clear()
    loop = asyncio.get_running_loop()
    try:
        scheduler = sched(mv)

        def patient(x: int, **extra: Any) -> tuple[asyncio.Future[None], asyncio.Future[Any]]:
            joined: asyncio.Future[None] = loop.create_future()
            seq = SequenceRef(id="s", joined=joined)
            return joined, asyncio.ensure_future(scheduler.infer_in(seq, {"x": x, **extra}, None))

        j1, r1 = patient(1, hold=True)
        await asyncio.wait_for(j1, 2)  # holds the turn
        j2, r2 = patient(2)
        await asyncio.wait_for(j2, 2)  # waits in the queue (its one place)
        j3, r3 = patient(3)
        await asyncio.sleep(0.05)
        assert not j3.done() and not r3.done()  # no room: it waits, nothing refused
        with pytest.raises(SequenceLimit):  # a caller without joined is still refused at once
            await send(mv, "s", 100)
        module.GATE.set()
        await asyncio.wait_for(j3, 2)
        assert [(await r)["sum"] for r in (r1, r2, r3)] == [1, 3, 6]
        assert [x for _, x in module.SEEN] == [1, 2, 3]
    finally:
        module.GATE.set()
        await mv.close()


@pytest.mark.anyio
async def test_a_request_waiting_for_room_fails_when_its_sequence_closes(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    clock = ManualClock()
    config = SEQ + "max_sequence_queue_size: 1\nsequence_timeout_ms: 125\n"
    mv = version_from(tmp_path, SUM, config, executor, clock)
    await mv.load()
    module = model_module(mv)
    module.GATE.clear()
    loop = asyncio.get_running_loop()
    try:
        running = asyncio.ensure_future(send(mv, "s", 1, hold=True))
        await wait_until(lambda: len(module.SEEN) == 1)
        queued = asyncio.ensure_future(send(mv, "s", 2))
        await wait_until(lambda: sched(mv).statistics()["queued"] == 1)
        joined: asyncio.Future[None] = loop.create_future()
        waiting = asyncio.ensure_future(
            sched(mv).infer_in(SequenceRef(id="s", joined=joined), {"x": 3}, None)
        )
        await asyncio.sleep(0.01)
        clock.advance(0.125)
        for doomed in (queued, waiting):
            with pytest.raises(SequenceClosed, match="older than sequence_timeout_ms"):
                await doomed
        module.GATE.set()
        assert (await running)["sum"] == 1
    finally:
        module.GATE.set()
        await mv.close()
