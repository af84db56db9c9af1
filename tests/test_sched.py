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
import time
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


def test_a_thread_that_names_itself_after_a_look_is_moved_on_the_next(sched_on: None) -> None:
    """grpc starts its threads as the server starts: a look can catch one before it names
    itself (its creator's name). It is looked at again once, then left."""
    named, go = threading.Event(), threading.Event()
    steps: list[threading.Event] = [threading.Event() for _ in range(2)]
    tids: list[int] = []

    def late() -> None:
        tids.append(threading.get_native_id())
        named.set()
        steps[0].wait(10)  # looked at under its creator's name
        ctypes.CDLL(None).prctl(15, b"pdtest_late", 0, 0, 0)
        steps[1].set()
        go.wait(10)

    thread = threading.Thread(target=late)
    thread.start()
    try:
        assert named.wait(10)
        assert sched.batch_named_threads(("pdtest_late",)) == 0
        steps[0].set()
        assert steps[1].wait(10)
        assert sched.batch_named_threads(("pdtest_late",)) == 1
        assert os.sched_getscheduler(tids[0]) == BATCH
        assert sched.batch_named_threads(("pdtest_late",)) == 0
    finally:
        go.set()
        steps[0].set()
        thread.join()


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
    """Where its code runs: the sync load's thread's policy (the pool for sync model code), the
    sync predict's (a model thread), and the main thread's."""

    import os


    class Model:
        def load(self) -> None:
            self.loaded = os.sched_getscheduler(0)

        def predict(self, request: dict) -> dict:
            return {
                "load": self.loaded,
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
    """A real server: a sync load's thread (the pool for sync model code), the sync predict's
    thread and grpc's I/O threads under SCHED_BATCH by default, in the server and in a process
    worker alike; the main thread (the event loop's) never; ``--no-sched-batch``: none."""
    for name, config in (("where", ""), ("procs", "workers: process\n")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.py").write_text(textwrap.dedent(MODEL))
        (tmp_path / name / "config.yaml").write_text(config)
    args = () if on else ("--no-sched-batch",)
    with run_server(tmp_path / "where", tmp_path / "procs", args=args) as server:
        answers = {
            name: httpx.post(f"{server.url}/v1/models/{name}:predict", json={}, timeout=10)
            for name in ("where", "procs")
        }
        grpc_address = server.addresses["grpc-inference"]
        with grpc.insecure_channel(grpc_address) as channel:  # the gRPC listener serves
            grpc.channel_ready_future(channel).result(timeout=10)
        expected = BATCH if on else os.SCHED_OTHER
        # grpc may start an I/O thread from the loop's thread after the scan at start: the relay
        # moves it on its next idle second
        for _ in range(50):
            threads = threads_of(server.proc.pid)
            if {p for n, p in threads.values() if n.startswith(sched.GRPC_THREADS)} == {expected}:
                break
            time.sleep(0.1)
    for answer in answers.values():
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"load": expected, "policy": expected, "main": os.SCHED_OTHER}
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
