"""Process workers pipeline: requests queued ahead in the worker process (issue 14, item 3).

What happened is read from the model's own event file (order, counts), never from timings.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import test_process_workers as _base

from podium.errors import QueueFull, ResponseTimeout, WorkerDied
from podium.runtime.process import _child
from podium.runtime.process._messages import Answer, Cancel, End, Infer
from podium.runtime.process._wire import Decoder, Encoder, Ring
from podium.runtime.workers import queue_ahead

Lab, _alive = _base.Lab, _base._alive
executor, lab = _base.executor, _base.lab  # the fixtures, shared

GATED = """
class Model:
    def predict(self, inputs):
        record("start", x=inputs)
        if inputs == "hold":
            gate(EVENTS + ".open")
        record("end", x=inputs)
        return {"pid": os.getpid(), "x": inputs}
"""


def _open(lab: Lab) -> None:
    (lab.tmp / "events.jsonl.open").write_text("")


@pytest.mark.anyio
async def test_requests_queue_ahead_in_the_worker_and_predict_concurrency_stays_the_bound(
    lab: Lab,
) -> None:
    mv = lab.version(GATED)
    await mv.load()
    held = asyncio.ensure_future(mv.scheduler.infer("hold", None))
    await lab.wait(lambda: lab.recorded("start"))
    queued = [asyncio.ensure_future(mv.scheduler.infer(i, None)) for i in range(5)]
    # all five are in the worker process (none waits in the server's line), none has started
    await lab.wait(lambda: mv.statistics()["busy"] == 6)
    assert mv.statistics()["waiting"] == 0
    assert [e["x"] for e in lab.recorded("start")] == ["hold"]
    _open(lab)
    assert (await held)["x"] == "hold"
    assert [a["x"] for a in await asyncio.gather(*queued)] == [0, 1, 2, 3, 4]
    # predict_concurrency 1: each predict ended before the next started, in the order sent
    events = [(e["event"], e["x"]) for e in lab.recorded() if e["event"] in ("start", "end")]
    expected = [("start", "hold"), ("end", "hold")]
    for i in range(5):
        expected += [("start", i), ("end", i)]
    assert events == expected


@pytest.mark.anyio
async def test_a_worker_takes_queue_ahead_requests_and_the_rest_wait_in_the_shared_line(
    lab: Lab,
) -> None:
    mv = lab.version(GATED, "max_workers: 2\n")
    await mv.load()
    held = asyncio.ensure_future(mv.scheduler.infer("hold", None))
    await lab.wait(lambda: lab.recorded("start"))
    queued = [asyncio.ensure_future(mv.scheduler.infer("hold", None)) for _ in range(20)]
    # its slot and QUEUE_AHEAD more in its process; the rest wait in the shared line (so that
    # a long predict holds little work back from other workers)
    ahead = queue_ahead(1, mv.config)
    await lab.wait(lambda: mv.statistics()["busy"] == 1 + ahead)
    assert mv.statistics()["waiting"] == 21 - (1 + ahead)
    await mv.scale(2)
    # the second worker takes its share from the line
    await lab.wait(lambda: mv.statistics()["busy"] == 2 * (1 + ahead))
    assert mv.statistics()["waiting"] == 21 - 2 * (1 + ahead)
    _open(lab)
    answers = await asyncio.gather(held, *queued)
    assert [a["x"] for a in answers] == ["hold"] * 21
    assert len({a["pid"] for a in answers}) == 2


@pytest.mark.anyio
async def test_a_model_with_a_queue_policy_queues_nothing_in_the_worker(lab: Lab) -> None:
    # its requests wait in the gate's line, where their deadlines and priority levels hold
    mv = lab.version(GATED, "max_queue_delay: 60000\n")
    await mv.load()
    held = asyncio.ensure_future(mv.scheduler.infer("hold", None))
    await lab.wait(lambda: lab.recorded("start"))
    queued = [asyncio.ensure_future(mv.scheduler.infer("wait", None)) for _ in range(3)]
    await lab.wait(lambda: mv.statistics()["waiting"] == 3)
    assert mv.statistics()["busy"] == 1
    _open(lab)
    answers = await asyncio.gather(held, *queued)
    assert [a["x"] for a in answers] == ["hold", "wait", "wait", "wait"]


@pytest.mark.anyio
async def test_a_queued_request_whose_client_leaves_never_runs(lab: Lab) -> None:
    mv = lab.version(GATED)
    await mv.load()
    held = asyncio.ensure_future(mv.scheduler.infer("hold", None))
    await lab.wait(lambda: lab.recorded("start"))
    leaving = asyncio.ensure_future(mv.scheduler.infer("leaves", None))
    staying = asyncio.ensure_future(mv.scheduler.infer("stays", None))
    await lab.wait(lambda: mv.statistics()["busy"] == 3)
    leaving.cancel()
    # the worker drops it from its queue and says so: its slot is free before the predict ends
    await lab.wait(lambda: mv.statistics()["busy"] == 2)
    _open(lab)
    await held
    assert (await staying)["x"] == "stays"
    assert leaving.cancelled()
    assert [e["x"] for e in lab.recorded("start")] == ["hold", "stays"]


@pytest.mark.anyio
async def test_response_timeout_starts_when_the_predict_starts_not_while_queued(lab: Lab) -> None:
    # each predict takes 0.7 s of a 1.2 s timeout; the second waits 0.7 s behind the first in
    # the worker: counted from when it was sent it would be 1.4 s, past the timeout
    mv = lab.version(
        """
        class Model:
            def predict(self, inputs):
                time.sleep(0.7)
                return os.getpid()
        """,
        "response_timeout: 1.2\n",
    )
    await mv.load()
    first = asyncio.ensure_future(mv.scheduler.infer(1, None))
    second = asyncio.ensure_future(mv.scheduler.infer(2, None))
    await lab.wait(lambda: mv.statistics()["busy"] == 2)  # both in the worker process
    pids = await asyncio.gather(first, second)
    assert pids[0] == pids[1]


@pytest.mark.anyio
async def test_a_recycled_worker_sends_its_queued_requests_to_the_next_one(lab: Lab) -> None:
    mv = lab.version(
        """
        class Model:
            def predict(self, inputs):
                record("start", x=inputs)
                if inputs == "stuck":
                    time.sleep(30)
                return os.getpid()
        """,
        "response_timeout: 0.5\n",
    )
    await mv.load()
    stuck = asyncio.ensure_future(mv.scheduler.infer("stuck", None))
    await lab.wait(lambda: lab.recorded("start"))
    (old,) = [w.pid for w in mv.workers()]
    queued = [asyncio.ensure_future(mv.scheduler.infer(i, None)) for i in range(3)]
    await lab.wait(lambda: mv.statistics()["busy"] == 4)
    with pytest.raises(ResponseTimeout):
        await stuck
    # they had not started in the stuck worker: the replacement runs them, in order
    pids = await asyncio.gather(*queued)
    assert old not in pids and len(set(pids)) == 1
    assert [e["x"] for e in lab.recorded("start")] == ["stuck", 0, 1, 2]
    await lab.wait(lambda: not _alive(old))


# -- the worker's side, over a fake socket ---------------------------------------------------


class _Transport:
    def __init__(self, log: list[Any]) -> None:
        self.log = log
        self._decoder = Decoder(log.append)

    def is_closing(self) -> bool:
        return False

    def writelines(self, pieces: list[Any]) -> None:
        self._decoder.feed(b"".join(bytes(p) for p in pieces))


class _Runner:
    """Records when each request starts; request ``n`` waits for ``release[n]``."""

    def __init__(self, log: list[Any]) -> None:
        self.log = log
        self.release: dict[Any, asyncio.Event] = {}
        self.stats = None

    async def infer(self, inputs: Any, request: Any) -> Any:
        self.log.append(("started", inputs))
        event = self.release.setdefault(inputs, asyncio.Event())
        await event.wait()
        return inputs


def _child_with_runner(gated: bool) -> tuple[Any, list[Any], _Runner]:
    log: list[Any] = []
    child = _child.Child(asyncio.Event())
    child.connection_made(_Transport(log))
    runner = _Runner(log)
    child.runner = runner
    child._gated, child._limit = gated, 1
    return child, log, runner


@pytest.mark.anyio
async def test_the_worker_starts_a_queued_request_only_after_the_answer_before_it_left() -> None:
    child, log, runner = _child_with_runner(gated=True)
    child.data_received(
        b"".join(b"".join(Encoder().encode(Infer(cid, cid, None))) for cid in (1, 2, 3))
    )
    for _ in range(5):
        await asyncio.sleep(0)
    assert log == [("started", 1)]
    runner.release.setdefault(1, asyncio.Event()).set()
    runner.release.setdefault(2, asyncio.Event()).set()
    runner.release.setdefault(3, asyncio.Event()).set()
    for _ in range(20):
        await asyncio.sleep(0)
    answers = [(type(m).__name__, m.cid) if not isinstance(m, tuple) else m for m in log]
    assert answers == [
        ("started", 1),
        ("Answer", 1),
        ("started", 2),
        ("Answer", 2),
        ("started", 3),
        ("Answer", 3),
    ]


@pytest.mark.anyio
async def test_with_nothing_else_running_an_answer_leaves_and_the_next_starts_at_once() -> None:
    child, log, runner = _child_with_runner(gated=True)
    for cid in (1, 2):
        runner.release[cid] = asyncio.Event()
        runner.release[cid].set()  # (each predict still awaits once)
    child.data_received(
        b"".join(b"".join(Encoder().encode(Infer(cid, cid, None))) for cid in (1, 2))
    )
    for _ in range(2):
        await asyncio.sleep(0)  # request 1's task runs to its end
    # its answer left as it ended (not a turn of the loop later), and request 2 began then
    steps = [(type(m).__name__, m.cid) if not isinstance(m, tuple) else m for m in log]
    assert steps[:3] == [("started", 1), ("Answer", 1), ("started", 2)]


@pytest.mark.anyio
async def test_a_request_to_an_idle_worker_is_written_at_once(lab: Lab) -> None:
    mv = lab.version(GATED)
    await mv.load()
    (worker,) = mv.scheduler.pool.gate.workers
    transport = worker._connection.transport
    writers: list[Any] = []

    class Recording:
        def __getattr__(self, name: str) -> Any:
            return getattr(transport, name)

        def writelines(self, pieces: Any) -> None:
            writers.append(asyncio.current_task())  # None: a later callback wrote it
            transport.writelines(pieces)

    worker._connection.transport = Recording()
    first = asyncio.ensure_future(mv.scheduler.infer("hold", None))
    await lab.wait(lambda: lab.recorded("start"))
    assert writers == [first]  # written by the request's own task, as it was sent
    second = asyncio.ensure_future(mv.scheduler.infer(2, None))
    await lab.wait(lambda: mv.statistics()["busy"] == 2)
    await asyncio.sleep(0)
    assert writers[1:] == [None]  # the worker was busy: the turn's requests share one write
    _open(lab)
    assert (await first)["x"] == "hold" and (await second)["x"] == 2


@pytest.mark.anyio
async def test_a_cancel_that_arrives_with_its_request_still_answers_end() -> None:
    # the request's task is cancelled before it begins: its body, which answers, never runs
    child, log, _ = _child_with_runner(gated=False)
    encode = Encoder().encode
    child.data_received(b"".join([*encode(Infer(1, "x", None)), *encode(Cancel(1))]))
    for _ in range(5):
        await asyncio.sleep(0)
    assert [m for m in log if isinstance(m, End | Answer)] == [End(1)]
    assert not any(isinstance(m, tuple) for m in log)  # it never started


# -- large tensors through shared memory -----------------------------------------------------


def _segments() -> list[str]:
    return sorted(p.name for p in Path("/dev/shm").glob(f"podium-{os.getpid()}-*"))


@pytest.mark.anyio
@pytest.mark.skipif(not Ring.available(), reason="no /dev/shm")
async def test_large_arrays_cross_through_shared_memory_and_none_is_left_when_a_worker_dies(
    lab: Lab,
) -> None:
    mv = lab.version(
        """
        class Model:
            def predict(self, inputs):
                x = inputs["x"]
                record("got", n=int(x.size), writable=bool(x.flags.writeable))
                return {"y": x * 2}
        """
    )
    await mv.load()
    big = np.arange(1 << 20, dtype=np.float32)  # 4 MiB each way
    # a worker that dies before it maps the server's ring: the server removes the file
    (pid,) = [w.pid for w in mv.workers()]
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    call = asyncio.ensure_future(mv.scheduler.infer({"x": big}, None))
    await lab.wait(lambda: len(_segments()) == 1)
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(WorkerDied):
        await call
    await lab.wait(lambda: [w.state for w in mv.workers()] == ["ready"])
    assert _segments() == []
    # the replacement: arrays both ways, several times round each ring
    for i in range(40):
        answer = await mv.scheduler.infer({"x": big + i}, None)
        np.testing.assert_array_equal(answer["y"], (big + i) * 2)
    assert [(e["n"], e["writable"]) for e in lab.recorded("got")] == [(1 << 20, True)] * 40
    assert _segments() == []  # each reader unlinked the other's ring when it mapped it


@pytest.mark.anyio
async def test_a_batch_waits_ahead_in_the_worker_and_a_crash_sends_it_to_the_replacement(
    lab: Lab,
) -> None:
    mv = lab.version(
        """
        class Model:
            def predict(self, batch):
                record("batch", xs=batch)
                if "hold" in batch:
                    gate(EVENTS + ".open")
                return [{"pid": os.getpid(), "x": x} for x in batch]
        """,
        "batch_size: 2\nmax_batch_delay: 10000\n",
    )
    await mv.load()
    held = [asyncio.ensure_future(mv.scheduler.infer(x, None)) for x in ("hold", "h2")]
    await lab.wait(lambda: lab.recorded("batch"))
    ahead = [asyncio.ensure_future(mv.scheduler.infer(x, None)) for x in (1, 2)]
    # one batch runs, the next (one message) waits in the worker process: two of its slots
    await lab.wait(lambda: mv.statistics()["busy"] == 2)
    assert mv.statistics()["queued"] == 2  # they wait: counted against max_queue_size
    (victim,) = [w.pid for w in mv.workers()]
    assert victim is not None
    os.kill(victim, signal.SIGKILL)
    for call in held:
        with pytest.raises(WorkerDied):
            await call
    answers = await asyncio.gather(*ahead)
    assert [a["x"] for a in answers] == [1, 2] and {a["pid"] for a in answers} != {victim}
    assert [e["xs"] for e in lab.recorded("batch")] == [["hold", "h2"], [1, 2]]
    assert mv.statistics()["queued"] == 0


@pytest.mark.anyio
async def test_a_worker_process_takes_a_batch_ahead_per_predict_slot(lab: Lab) -> None:
    mv = lab.version(
        """
        class Model:
            def predict(self, batch):
                record("batch", xs=batch)
                if "hold" in batch:
                    gate(EVENTS + ".open")
                return list(batch)
        """,
        "batch_size: 2\nmax_batch_delay: 10000\npredict_concurrency: 2\n",
    )
    await mv.load()
    running = [asyncio.ensure_future(mv.scheduler.infer(x, None)) for x in ("hold", 1, "hold", 2)]
    await lab.wait(lambda: len(lab.recorded("batch")) == 2)  # two batches at once
    ahead = [asyncio.ensure_future(mv.scheduler.infer(x, None)) for x in (3, 4, 5, 6)]
    # and two more (a batch per slot) wait in the worker process, counted as queued
    await lab.wait(lambda: mv.statistics()["busy"] == 4)
    assert mv.statistics()["queued"] == 4
    assert len(lab.recorded("batch")) == 2
    _open(lab)
    assert await asyncio.gather(*running, *ahead) == ["hold", 1, "hold", 2, 3, 4, 5, 6]
    batches = [e["xs"] for e in lab.recorded("batch")]
    # formed in the order sent; the two predict threads may record them in either order
    assert sorted(batches[2:]) == [[3, 4], [5, 6]]
    assert mv.statistics()["queued"] == 0


@pytest.mark.anyio
async def test_requests_queued_in_a_worker_count_against_max_queue_size(lab: Lab) -> None:
    mv = lab.version(GATED, "max_queue_size: 3\n")
    await mv.load()
    held = asyncio.ensure_future(mv.scheduler.infer("hold", None))
    await lab.wait(lambda: lab.recorded("start"))
    queued = [asyncio.ensure_future(mv.scheduler.infer(i, None)) for i in range(3)]
    await lab.wait(lambda: mv.statistics()["busy"] == 4)  # at most max_queue_size ahead
    with pytest.raises(QueueFull):
        await mv.scheduler.infer("one too many", None)
    _open(lab)
    await held
    assert [a["x"] for a in await asyncio.gather(*queued)] == [0, 1, 2]
