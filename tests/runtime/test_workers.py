"""Workers in the server process: podium.runtime._gate, podium.runtime.workers (thread workers),
scaling, response_timeout, min_workers 0 and Registry.remove. Judged by what happened, in order."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_until

from podium.errors import (
    InvalidInput,
    NotFound,
    QueueFull,
    ResponseTimeout,
    Unavailable,
    http_status,
)
from podium.model.discovery import discover_all
from podium.runtime import workers as workers_module
from podium.runtime._gate import WorkerGate
from podium.runtime.loading import build_version
from podium.runtime.registry import ModelState, ModelVersion, Registry


class W:
    def __init__(self, name: str, capacity: int = 1) -> None:
        self.name = name
        self.busy = 0
        self.capacity = capacity


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(16, thread_name_prefix="test-model") as pool:
        yield pool


def version_from(
    tmp_path: Path, code: str, config: str, executor: ThreadPoolExecutor
) -> ModelVersion:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.py").write_text(code)
    (folder / "config.yaml").write_text(config)
    found, problems = discover_all(folder)
    assert not problems
    return build_version(found[0], secrets={}, executor=executor)


# -- the gate ------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_least_loaded_worker_gets_the_next_request() -> None:
    gate = WorkerGate("m", max_waiting=10)
    a, b = W("a", 2), W("b", 2)
    gate.add(a)
    gate.add(b)
    got = [(await gate.acquire()).name for _ in range(4)]
    assert got == ["a", "b", "a", "b"]
    gate.release(b)
    assert (await gate.acquire()).name == "b"


@pytest.mark.anyio
async def test_one_fifo_line_for_every_worker_and_it_is_bounded() -> None:
    gate = WorkerGate("m", max_waiting=2)
    a, b = W("a"), W("b")
    gate.add(a)
    gate.add(b)
    await gate.acquire()
    await gate.acquire()
    first = asyncio.ensure_future(gate.acquire())
    second = asyncio.ensure_future(gate.acquire())
    await asyncio.sleep(0)
    with pytest.raises(QueueFull) as full:
        await gate.acquire()
    assert http_status(full.value) == 503
    gate.release(b)  # b's slot goes to the oldest waiter
    assert (await first).name == "b"
    assert not second.done()
    gate.release(a)
    assert (await second).name == "a"


@pytest.mark.anyio
async def test_a_removed_worker_takes_no_new_work_and_its_slots_are_not_reused() -> None:
    gate = WorkerGate("m", max_waiting=10)
    a, b = W("a"), W("b")
    gate.add(a)
    gate.add(b)
    assert (await gate.acquire()).name == "a"
    gate.remove(a)
    assert (await gate.acquire()).name == "b"
    waiter = asyncio.ensure_future(gate.acquire())
    await asyncio.sleep(0)
    gate.release(a)  # a finished its request, but it is gone
    await asyncio.sleep(0)
    assert not waiter.done() and a.busy == 0
    c = W("c")
    gate.add(c)  # a new worker serves the line at once
    assert (await waiter).name == "c"


@pytest.mark.anyio
async def test_no_worker_and_none_coming_is_503_at_once_but_a_starting_one_is_waited_for() -> None:
    gate = WorkerGate("m", max_waiting=10)
    with pytest.raises(Unavailable, match="no workers"):
        await gate.acquire()
    gate.starting = 1
    waiter = asyncio.ensure_future(gate.acquire())
    await asyncio.sleep(0)
    assert not waiter.done()
    a = W("a")
    gate.starting = 0
    gate.add(a)
    assert (await waiter) is a


@pytest.mark.anyio
async def test_a_waiter_cancelled_as_it_is_handed_a_slot_passes_it_on() -> None:
    gate = WorkerGate("m", max_waiting=10)
    a = W("a")
    gate.add(a)
    await gate.acquire()
    first = asyncio.ensure_future(gate.acquire())
    second = asyncio.ensure_future(gate.acquire())
    await asyncio.sleep(0)
    gate.release(a)  # handed to `first`...
    first.cancel()  # ...which is cancelled before it runs
    assert (await second) is a
    assert a.busy == 1


# -- thread workers ----------------------------------------------------------------------------

RECORDING = """
import asyncio, threading
EVENTS = []
GATE = threading.Event()
class Model:
    def __init__(self):
        self.me = id(self)
    async def predict(self, inputs):
        EVENTS.append(("start", self.me, inputs))
        while not GATE.is_set():
            await asyncio.sleep(0.002)
        EVENTS.append(("end", self.me, inputs))
        return {"me": self.me, "x": inputs}
"""


def model_module(mv: ModelVersion) -> Any:
    import sys

    obj = mv.instance.obj  # type: ignore[attr-defined]
    return sys.modules[type(obj).__module__]


@pytest.mark.anyio
async def test_thread_workers_are_separate_instances_each_with_its_own_slots(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    mv = version_from(tmp_path, RECORDING, "min_workers: 2\nmax_queue_size: 10\n", executor)
    await mv.load()
    try:
        assert mv.state is ModelState.READY
        infos = mv.workers()
        assert [(w.kind, w.state) for w in infos] == [("thread", "ready")] * 2
        module = model_module(mv)
        calls = [asyncio.ensure_future(mv.scheduler.infer(i, None)) for i in range(3)]
        await wait_until(lambda: len(module.EVENTS) == 2)
        await asyncio.sleep(0.02)
        # two instances, one slot each: two predicts run, the third waits in the line
        assert len(module.EVENTS) == 2
        assert len({me for _, me, _ in module.EVENTS}) == 2
        assert mv.statistics()["waiting"] == 1
        module.GATE.set()
        results = await asyncio.gather(*calls)
        assert [r["x"] for r in results] == [0, 1, 2]
        assert [e[2] for e in module.EVENTS if e[0] == "start"] == [0, 1, 2]  # FIFO
    finally:
        await mv.close()


@pytest.mark.anyio
async def test_scaling_down_under_load_fails_nothing_and_the_removed_worker_finishes_first(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    mv = version_from(tmp_path, RECORDING, "min_workers: 3\nmax_workers: 4\n", executor)
    await mv.load()
    try:
        module = model_module(mv)
        calls = [asyncio.ensure_future(mv.scheduler.infer(i, None)) for i in range(6)]
        await wait_until(lambda: len(module.EVENTS) == 3)
        scaling = asyncio.ensure_future(mv.scale(1))
        await wait_until(lambda: sum(w.state == "stopping" for w in mv.workers()) == 2)
        assert not scaling.done()  # the removed workers still hold a request each
        module.GATE.set()
        await scaling
        results = await asyncio.gather(*calls)
        assert [r["x"] for r in results] == list(range(6))
        assert [w.state for w in mv.workers()] == ["ready"]
        survivor = mv.workers()[0]
        # the last three ran on the survivor: removed workers took no new work
        late = [me for kind, me, x in module.EVENTS if kind == "start" and x >= 3]
        assert len(set(late)) == 1
        await mv.scale(2)
        assert len(mv.workers()) == 2 and survivor in mv.workers()
    finally:
        await mv.close()


@pytest.mark.anyio
async def test_scale_refuses_bad_numbers(tmp_path: Path, executor: ThreadPoolExecutor) -> None:
    mv = version_from(tmp_path, RECORDING, "", executor)
    await mv.load()
    try:
        for bad in ((-1, 2), (3, 2), (0, 0), (True, 2)):
            with pytest.raises(InvalidInput):
                await mv.scale(*bad)
    finally:
        await mv.close()


@pytest.mark.anyio
async def test_min_workers_0_is_ready_but_refuses_with_503_until_scaled_up(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    mv = version_from(tmp_path, RECORDING, "min_workers: 0\nmax_workers: 2\n", executor)
    await mv.load()
    try:
        assert mv.state is ModelState.READY
        assert mv.workers() == []
        with pytest.raises(Unavailable, match="no workers"):
            await mv.scheduler.infer(1, None)
        await mv.scale(1)
        model_module(mv).GATE.set()
        assert (await mv.scheduler.infer(1, None))["x"] == 1
    finally:
        await mv.close()


SLOW = """
import asyncio, threading, time
RELEASE = threading.Event()
class Model:
    def predict(self, inputs):
        if inputs == "stuck":
            RELEASE.wait(10)
        return inputs
"""

SLOW_ASYNC = """
import asyncio
CANCELLED = []
class Model:
    async def predict(self, inputs):
        try:
            await asyncio.sleep(float(inputs))
        except asyncio.CancelledError:
            CANCELLED.append(inputs)
            raise
        return inputs
"""


@pytest.mark.anyio
async def test_a_timed_out_async_predict_is_cancelled_and_504(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    mv = version_from(tmp_path, SLOW_ASYNC, "response_timeout: 0.05\n", executor)
    await mv.load()
    try:
        with pytest.raises(ResponseTimeout) as caught:
            await mv.scheduler.infer("30", None)
        assert http_status(caught.value) == 504
        await wait_until(lambda: model_module(mv).CANCELLED == ["30"])
        assert await mv.scheduler.infer("0", None) == "0"
        assert [w.id for w in mv.workers()] == ["1"]  # cancelled cleanly: nothing to recycle
    finally:
        await mv.close()


def test_a_thread_worker_keeps_response_timeout_on_the_next_event_loop(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    # The worker asks the loop it last ran on for the caller's task; on another loop it looks
    # again (a test's next loop; a server runs one).
    mv = version_from(tmp_path, SLOW_ASYNC, "response_timeout: 0.05\n", executor)

    async def first() -> Any:
        await mv.load()
        return await mv.scheduler.infer("0", None)

    async def second() -> None:
        try:
            with pytest.raises(ResponseTimeout):
                await mv.scheduler.infer("30", None)
            await wait_until(lambda: model_module(mv).CANCELLED == ["30"])
            assert await mv.scheduler.infer("0", None) == "0"
        finally:
            await mv.close()

    assert asyncio.run(first()) == "0"
    asyncio.run(second())


@pytest.mark.anyio
async def test_a_client_leaving_a_timed_predict_is_a_cancellation_not_a_timeout(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    mv = version_from(tmp_path, SLOW_ASYNC, "response_timeout: 30\n", executor)
    await mv.load()
    try:
        call = asyncio.ensure_future(mv.scheduler.infer("30", None))
        await wait_until(lambda: mv.statistics()["busy"] == 1)
        call.cancel()  # the client left long before the timeout
        with pytest.raises(asyncio.CancelledError):
            await call
        await wait_until(lambda: model_module(mv).CANCELLED == ["30"])
        assert await mv.scheduler.infer("0", None) == "0"  # the slot is free
    finally:
        await mv.close()


@pytest.mark.anyio
async def test_a_stuck_sync_predict_fails_at_once_and_its_thread_worker_is_replaced(
    tmp_path: Path, executor: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workers_module, "STUCK_GRACE", 0.01)
    mv = version_from(tmp_path, SLOW, "response_timeout: 0.05\n", executor)
    await mv.load()
    module = model_module(mv)
    try:
        with pytest.raises(ResponseTimeout, match="response_timeout 0.05 s"):
            await mv.scheduler.infer("stuck", None)
        # a fresh instance takes over; the stuck one takes no new work and keeps its slot
        await wait_until(lambda: [w.state for w in mv.workers()] == ["stopping", "ready"])
        assert await mv.scheduler.infer("next", None) == "next"
        module.RELEASE.set()  # the stuck call returns: its worker goes
        await wait_until(lambda: [w.id for w in mv.workers()] == ["2"])
    finally:
        module.RELEASE.set()
        await mv.close()


# -- Registry.remove ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_remove_refuses_new_requests_at_once_and_lets_running_ones_finish(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    mv = version_from(tmp_path, RECORDING, "", executor)
    registry = Registry()
    registry.add(mv)
    await registry.load_all()
    module = model_module(mv)
    running = asyncio.ensure_future(registry.ready("m").scheduler.infer(7, None))
    await wait_until(lambda: len(module.EVENTS) == 1)
    removing = asyncio.ensure_future(registry.remove("m"))
    await asyncio.sleep(0.01)
    with pytest.raises(NotFound):
        registry.ready("m")
    assert not removing.done()  # waits for the running request
    module.GATE.set()
    assert (await running)["x"] == 7
    assert await removing == [mv]
    assert mv.workers() == []
    with pytest.raises(NotFound):
        await registry.remove("m")


@pytest.mark.anyio
async def test_remove_one_version_keeps_the_others(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    registry = Registry()
    for v in ("1", "2"):
        folder = tmp_path / "m" / v
        folder.mkdir(parents=True)
        (folder / "model.py").write_text(
            "class Model:\n    def predict(self, x):\n        return x\n"
        )
    found, problems = discover_all(tmp_path / "m")
    assert not problems
    for source in found:
        registry.add(build_version(source, secrets={}, executor=executor))
    await registry.load_all()
    try:
        assert [mv.version for mv in await registry.remove("m", "2")] == ["2"]
        assert registry.ready("m").version == "1"
        with pytest.raises(NotFound):
            registry.get("m", "2")
    finally:
        await registry.close()
