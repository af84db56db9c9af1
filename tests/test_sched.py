"""``podium.sched``: the threads Podium hands work to run under Linux's ``SCHED_BATCH``
(``--sched-batch``, on by default); the event loop's thread, and anything else, do not."""

from __future__ import annotations

import asyncio
import ctypes
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from conftest import run_server

from podium import sched
from podium.model._threads import CallThreads
from podium.server._access_thread import LineThread

BATCH = getattr(os, "SCHED_BATCH", None)
pytestmark = pytest.mark.skipif(
    BATCH is None or not Path("/proc/self/task").is_dir(), reason="Linux's SCHED_BATCH"
)


@pytest.fixture
def sched_on() -> Iterator[None]:
    """The policy on for the test, and this process's setting as it was afterwards."""
    before, env = sched._enabled, os.environ.get(sched.ENV)
    sched.configure(True)
    yield
    sched._enabled = before
    if env is None:
        os.environ.pop(sched.ENV, None)
    else:
        os.environ[sched.ENV] = env


def in_thread(fn, name: str | None = None):  # type: ignore[no-untyped-def]
    """``fn()`` run in a new thread (its OS name set to ``name``): what it returned."""
    out: list[object] = []

    def run() -> None:
        if name is not None:  # prctl(PR_SET_NAME): the name /proc shows
            ctypes.CDLL(None).prctl(15, name.encode(), 0, 0, 0)
        out.append(fn())

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return out[0]


def policy() -> int:
    return os.sched_getscheduler(0)


def test_a_hand_off_thread_gets_sched_batch_and_no_other_thread_does(sched_on: None) -> None:
    assert in_thread(lambda: (sched.batch_this_thread(), policy())) == (True, BATCH)
    assert policy() != BATCH  # the caller's thread (a test's: the event loop's elsewhere)
    assert in_thread(policy) != BATCH  # a thread that did not ask


def test_off_every_thread_keeps_its_policy(sched_on: None) -> None:
    sched.configure(False)
    assert not sched.enabled()
    assert in_thread(lambda: (sched.batch_this_thread(), policy())) == (False, os.SCHED_OTHER)


def test_the_setting_reaches_worker_processes(sched_on: None) -> None:
    """A worker process reads the server's choice from the environment it inherits."""
    probe = [sys.executable, "-c", "from podium import sched; print(sched.enabled())"]
    for on, shown in ((False, "False"), (True, "True")):
        sched.configure(on)
        assert subprocess.run(probe, capture_output=True, text=True).stdout.strip() == shown


def test_named_threads_are_moved_once_and_others_left(sched_on: None) -> None:
    """A library's threads, found by their OS names (grpc's ``event_engine``)."""
    go, named = threading.Event(), threading.Event()
    tids: list[int] = []

    def wait() -> None:
        tids.append(threading.get_native_id())
        named.set()
        go.wait(10)

    thread = threading.Thread(target=lambda: in_thread(wait, "pdtest_named"))
    other = threading.Thread(target=go.wait, args=(10,))
    thread.start()
    other.start()
    try:
        assert named.wait(10)
        assert sched.batch_named_threads(("pdtest_named",)) == 1
        assert os.sched_getscheduler(tids[0]) == BATCH
        assert os.sched_getscheduler(other.native_id or 0) != BATCH
        assert os.sched_getscheduler(os.getpid()) != BATCH
        assert sched.batch_named_threads(("pdtest_named",)) == 0  # looked at once
    finally:
        go.set()
        thread.join()
        other.join()


def test_a_sync_call_runs_on_a_sched_batch_thread_unless_off(sched_on: None) -> None:
    async def run() -> int:
        threads = CallThreads("pdtest")
        try:
            return await threads.run(policy)
        finally:
            await threads.close()

    assert asyncio.run(run()) == BATCH
    sched.configure(False)
    assert asyncio.run(run()) == os.SCHED_OTHER


MODEL = '''
    """Where a sync predict runs: its thread's policy, and the main thread's."""

    import os


    class Model:
        def predict(self, request: dict) -> dict:
            return {
                "policy": os.sched_getscheduler(0),
                "main": os.sched_getscheduler(os.getpid()),
            }
'''


def threads_of(pid: int) -> dict[int, tuple[str, int]]:
    """The server's threads: OS name and policy, by id."""
    found = {}
    for entry in os.listdir(f"/proc/{pid}/task"):
        try:
            name = Path(f"/proc/{pid}/task/{entry}/comm").read_text().strip()
            found[int(entry)] = (name, os.sched_getscheduler(int(entry)))
        except OSError:  # ended meanwhile
            continue
    return found


@pytest.mark.parametrize("on", [True, False], ids=["default", "no-sched-batch"])
def test_podium_serve_runs_its_hand_off_threads_under_sched_batch(tmp_path: Path, on: bool) -> None:
    """A real server: the sync predict's thread and grpc's I/O threads under SCHED_BATCH by
    default, the main thread (the event loop's) never; ``--no-sched-batch``: none."""
    model = tmp_path / "where"
    model.mkdir()
    (model / "model.py").write_text(textwrap.dedent(MODEL))
    args = () if on else ("--no-sched-batch",)
    with run_server(model, args=args) as server:
        answer = httpx.post(f"{server.url}/v1/models/where:predict", json={}, timeout=10)
        assert answer.status_code == 200, answer.text
        grpc_address = server.addresses["grpc-inference"]
        with grpc.insecure_channel(grpc_address) as channel:  # the gRPC listener serves
            grpc.channel_ready_future(channel).result(timeout=10)
        threads = threads_of(server.proc.pid)
    expected = BATCH if on else os.SCHED_OTHER
    assert answer.json() == {"policy": expected, "main": os.SCHED_OTHER}
    assert threads[server.proc.pid][1] == os.SCHED_OTHER
    engine = [p for name, p in threads.values() if name.startswith(sched.GRPC_THREADS)]
    assert engine and set(engine) == {expected}
    batched = sum(p == BATCH for _, p in threads.values())
    # on: the model's thread, the relay's serving and sender threads, grpc's, at least
    assert batched >= len(engine) + 3 if on else batched == 0


def test_the_access_logs_writer_keeps_the_default_policy(sched_on: None) -> None:
    """It wakes on its own clock to write many lines at once: under SCHED_BATCH it held the GIL
    in longer runs and lengthened the requests' tail (bench/RESULTS.md §61)."""
    policies: list[int] = []
    lines = LineThread(lambda batch: policies.append(policy()))
    lines.put(["a"])
    assert lines.flush()
    lines.close()
    assert policies and BATCH not in policies
