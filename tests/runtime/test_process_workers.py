"""Process workers: podium.runtime.process, through a version's pool and scheduler.

Each test writes a small model into a temporary directory; the model records what happened to
a file the test reads (one JSON line per event), so tests assert what happened, never timings.
"""

from __future__ import annotations

import ast
import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import wait_until
from starlette.requests import Request

import podium.runtime.process
from podium.errors import Cancelled, ModelError, ResponseTimeout, WorkerDied, http_status
from podium.model.discovery import discover_all
from podium.runtime import workers as workers_module
from podium.runtime.loading import build_version
from podium.runtime.registry import ModelState, ModelVersion
from podium.server._requests import RequestSnapshots
from podium.types import InferenceResponse, ResponseOutput

HEADER = """
import asyncio, json, os, time
EVENTS = {events!r}
def record(event, **fields):
    with open(EVENTS, "a") as f:
        f.write(json.dumps({{"event": event, "pid": os.getpid(), **fields}}) + "\\n")
def gate(path):
    while not os.path.exists(path):
        time.sleep(0.005)
"""


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(8, thread_name_prefix="test-model") as pool:
        yield pool


class Lab:
    def __init__(self, tmp_path: Path, executor: ThreadPoolExecutor) -> None:
        self.tmp = tmp_path
        self.executor = executor
        self.events = tmp_path / "events.jsonl"
        self.versions: list[ModelVersion] = []

    def version(self, code: str, config: str = "", name: str = "m") -> ModelVersion:
        folder = self.tmp / name
        folder.mkdir()
        source = HEADER.format(events=str(self.events)) + textwrap.dedent(code)
        (folder / "model.py").write_text(source)
        (folder / "config.yaml").write_text("workers: process\n" + textwrap.dedent(config))
        found, problems = discover_all(folder)
        assert not problems
        mv = build_version(found[0], secrets={}, executor=self.executor, codec=RequestSnapshots())
        self.versions.append(mv)
        return mv

    def recorded(self, event: str | None = None) -> list[dict[str, Any]]:
        if not self.events.exists():
            return []
        lines = [json.loads(line) for line in self.events.read_text().splitlines()]
        return [e for e in lines if event is None or e["event"] == event]

    async def wait(self, condition: Callable[[], Any], within: float = 10.0) -> None:
        await wait_until(condition, within, every=0.01)  # the model's event file, polled


@pytest.fixture
async def lab(tmp_path: Path, executor: ThreadPoolExecutor) -> Any:
    made = Lab(tmp_path, executor)
    try:
        yield made
    finally:
        pids = [w.pid for mv in made.versions for w in mv.workers()]
        for mv in made.versions:
            await mv.close()
        for pid in pids:  # no worker process outlives its pool
            assert pid is not None and not _alive(pid), f"worker process {pid} left behind"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


ECHO = """
class Model:
    def predict(self, inputs):
        return {"pid": os.getpid(), "inputs": inputs}
"""


@pytest.mark.anyio
async def test_process_workers_answer_from_their_own_processes_and_arrays_travel(lab: Lab) -> None:
    mv = lab.version(ECHO, "min_workers: 2\n")
    await mv.load()
    assert mv.state is ModelState.READY, mv.reason
    infos = mv.workers()
    assert [(w.kind, w.state) for w in infos] == [("process", "ready")] * 2
    pids = {w.pid for w in infos}
    assert os.getpid() not in pids
    big = np.arange(1 << 20, dtype=np.float32).reshape(1024, 1024)  # 4 MiB: out of band
    results = await asyncio.gather(*(mv.scheduler.infer({"x": big + i}, None) for i in range(4)))
    for i, result in enumerate(results):
        np.testing.assert_array_equal(result["inputs"]["x"], big + i)
    assert {r["pid"] for r in results} == pids  # both workers served
    assert results[0]["inputs"]["x"].flags.writeable


@pytest.mark.anyio
async def test_model_errors_cross_the_process_boundary_with_their_status(lab: Lab) -> None:
    mv = lab.version(
        """
        class Model:
            def predict(self, inputs):
                raise ValueError("bad " + str(inputs))
        """
    )
    await mv.load()
    with pytest.raises(ModelError, match="predict raised ValueError: bad 7") as caught:
        await mv.scheduler.infer(7, None)
    assert http_status(caught.value) == 500


@pytest.mark.anyio
async def test_the_worker_gets_a_starlette_request_that_sees_the_client_leave(lab: Lab) -> None:
    mv = lab.version(
        """
        from starlette.requests import Request
        class Model:
            async def predict(self, inputs, request: Request):
                record("seen", method=request.method, url=str(request.url),
                       header=request.headers.get("x-a"), body=(await request.body()).decode(),
                       disconnected=await request.is_disconnected())
                if inputs == "wait":
                    try:
                        await asyncio.sleep(30)
                    except asyncio.CancelledError:
                        record("cancelled", disconnected=await request.is_disconnected())
                        raise
                return "done"
        """
    )
    await mv.load()

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"payload", "more_body": False}

    scope = {
        "type": "http",
        "method": "PUT",
        "scheme": "http",
        "server": ("example", 8080),
        "path": "/v1/models/m:predict",
        "raw_path": b"/v1/models/m:predict",
        "query_string": b"q=1",
        "root_path": "",
        "headers": [(b"host", b"example:8080"), (b"x-a", b"b")],
        "client": ("127.0.0.1", 5000),
        "app": object(),  # server objects do not travel
    }
    assert await mv.scheduler.infer("now", Request(scope, receive)) == "done"
    (seen,) = lab.recorded("seen")
    assert seen["method"] == "PUT"
    assert seen["url"] == "http://example:8080/v1/models/m:predict?q=1"
    assert (seen["header"], seen["body"], seen["disconnected"]) == ("b", "payload", False)
    # the client leaves: the server cancels the call; the worker cancels the model's work
    call = asyncio.ensure_future(mv.scheduler.infer("wait", Request(scope, receive)))
    await lab.wait(lambda: len(lab.recorded("seen")) == 2)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await lab.wait(lambda: lab.recorded("cancelled"))
    assert lab.recorded("cancelled")[0]["disconnected"] is True
    await lab.wait(lambda: mv.statistics()["busy"] == 0)  # the slot is back


KILLABLE = """
class Model:
    def predict(self, inputs):
        record("start", x=inputs)
        if inputs == "hold":
            gate(EVENTS + ".open")
        return {"pid": os.getpid(), "x": inputs}
"""


@pytest.mark.anyio
async def test_a_killed_worker_fails_what_it_held_and_the_queued_requests_survive(
    lab: Lab,
) -> None:
    mv = lab.version(KILLABLE, "min_workers: 1\n")
    await mv.load()
    held = asyncio.ensure_future(mv.scheduler.infer("hold", None))
    await lab.wait(lambda: lab.recorded("start"))
    queued = [asyncio.ensure_future(mv.scheduler.infer(i, None)) for i in range(3)]
    # they are queued ahead in the worker process itself, behind the one it runs
    await lab.wait(lambda: mv.statistics()["busy"] == 4)
    assert mv.statistics()["waiting"] == 0
    (victim,) = [w.pid for w in mv.workers()]
    assert victim is not None
    os.kill(victim, signal.SIGKILL)
    with pytest.raises(WorkerDied) as caught:
        await held
    message = str(caught.value)
    assert f"worker process {victim} died" in message and "SIGKILL" in message
    assert not isinstance(caught.value, Cancelled) and http_status(caught.value) == 500
    # the requests queued in it had not started: they went to the new worker process, in order
    answers = await asyncio.gather(*queued)
    assert [a["x"] for a in answers] == [0, 1, 2]
    assert {a["pid"] for a in answers} != {victim}
    assert [w.state for w in mv.workers()] == ["ready"]


@pytest.mark.anyio
async def test_a_predict_past_response_timeout_is_504_and_the_process_is_replaced(
    lab: Lab,
) -> None:
    mv = lab.version(
        """
        class Model:
            def predict(self, inputs):
                time.sleep(inputs)
                return os.getpid()
        """,
        "response_timeout: 0.3\n",
    )
    await mv.load()
    old = await mv.scheduler.infer(0, None)
    with pytest.raises(ResponseTimeout, match="response_timeout 0.3 s") as caught:
        await mv.scheduler.infer(30, None)
    assert http_status(caught.value) == 504
    await lab.wait(lambda: not _alive(old))
    assert await mv.scheduler.infer(0, None) != old


@pytest.mark.anyio
async def test_a_worker_that_cannot_start_fails_the_version_with_the_reason(lab: Lab) -> None:
    mv = lab.version(
        """
        class Model:
            def __init__(self):
                raise RuntimeError("no weights here")
            def predict(self, inputs):
                return inputs
        """
    )
    await mv.load()
    assert mv.state is ModelState.FAILED
    assert "no weights here" in mv.reason
    assert mv.workers() == []


@pytest.mark.anyio
async def test_repeated_restart_failures_back_off_then_fail_the_version(
    lab: Lab, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workers_module, "BACKOFF_FIRST", 0.01)
    monkeypatch.setattr(workers_module, "MAX_START_FAILURES", 3)
    mv = lab.version(
        """
        class Model:
            def load(self):
                record("load")
                if os.path.exists(EVENTS + ".broken"):
                    raise RuntimeError("the disk is gone")
            def predict(self, inputs):
                return inputs
        """
    )
    await mv.load()
    assert mv.state is ModelState.READY
    Path(str(lab.events) + ".broken").touch()  # noqa: ASYNC240 - one local file
    (victim,) = [w.pid for w in mv.workers()]
    os.kill(victim, signal.SIGKILL)
    await lab.wait(lambda: mv.state is ModelState.FAILED)
    assert "the disk is gone" in mv.reason and "3 attempts" in mv.reason
    assert len(lab.recorded("load")) == 1 + 3  # the first start, then three tries, no more
    await asyncio.sleep(0.1)
    assert len(lab.recorded("load")) == 4


@pytest.mark.anyio
async def test_scaling_process_workers_under_load_fails_no_request(lab: Lab) -> None:
    mv = lab.version(
        """
        class Model:
            def predict(self, inputs):
                time.sleep(0.005)
                return {"pid": os.getpid(), "x": inputs}
        """,
        "min_workers: 1\nmax_workers: 3\n",
    )
    await mv.load()
    calls = [asyncio.ensure_future(mv.scheduler.infer(i, None)) for i in range(60)]
    await mv.scale(3)
    assert [w.state for w in mv.workers()] == ["ready"] * 3
    await mv.scale(1)
    results = await asyncio.gather(*calls)
    assert [r["x"] for r in results] == list(range(60))
    assert len(mv.workers()) == 1


@pytest.mark.anyio
async def test_streams_from_a_worker_process_with_back_pressure_and_early_close(
    lab: Lab,
) -> None:
    mv = lab.version(
        """
        class Model:
            async def predict(self, inputs):
                try:
                    for i in range(inputs):
                        record("yield", i=i)
                        yield i
                except GeneratorExit:
                    record("closed")
                    raise
        """,
        "stream_buffer: 4\n",
    )
    await mv.load()
    assert mv.instance.capabilities.streaming
    items = [i async for i in mv.scheduler.stream(5, None)]
    assert items == [0, 1, 2, 3, 4]
    stream = mv.scheduler.stream(1000, None)
    assert await anext(stream) == 0
    await lab.wait(lambda: len(lab.recorded("yield")) >= 5 + 4)
    await asyncio.sleep(0.1)
    # the reader took one item: the worker ran at most the window (4) ahead, plus the item in
    # its one-item buffer and the one it holds
    assert len(lab.recorded("yield")) <= 5 + 1 + 4 + 2
    await stream.aclose()
    await lab.wait(lambda: lab.recorded("closed"))
    await lab.wait(lambda: mv.statistics()["busy"] == 0)


@pytest.mark.anyio
async def test_batches_run_in_a_worker_process(lab: Lab) -> None:
    mv = lab.version(
        """
        class Model:
            def preprocess(self, inputs):
                if inputs == "bad":
                    raise ValueError("bad input")
                return inputs * 10
            def predict(self, batch):
                record("batch", size=len(batch))
                return [x + 1 for x in batch]
        """,
        "batch_size: 4\nmax_batch_delay: 50\n",
    )
    await mv.load()
    results = await asyncio.gather(
        *(mv.scheduler.infer(i, None) for i in (1, 2, "bad", 3)), return_exceptions=True
    )
    assert results[:2] == [11, 21] and results[3] == 31
    assert isinstance(results[2], ModelError) and "bad input" in str(results[2])
    assert [e["size"] for e in lab.recorded("batch")] == [3]


@pytest.mark.anyio
async def test_values_cross_a_worker_process_as_the_wire_rule_says(lab: Lab) -> None:
    # (the rule: podium.runtime.process._wire's docstring; its unit tests cover each case)
    mv = lab.version(
        """
        import numpy as np
        from podium.types import InferenceResponse, ResponseOutput

        class Model:
            def predict(self, batch):
                out = {
                    "tuple": (1, 2),
                    "nested": {"t": (1, 2), "s": np.float32(1.5)},
                    "array": np.asfortranarray(np.arange(6.0).reshape(2, 3)),
                    "oip": InferenceResponse(
                        model_name="m",
                        outputs=[ResponseOutput(name="y", shape=[2], datatype="FP32",
                                                data=np.ones(2, np.float32))],
                    ),
                }
                return [out[x] for x in batch]
        """,
        "batch_size: 4\nmax_batch_delay: 50\n",
    )
    await mv.load()
    kinds = ("tuple", "nested", "array", "oip")
    answers = await asyncio.gather(*(mv.scheduler.infer(k, None) for k in kinds))
    got = dict(zip(kinds, answers, strict=True))
    assert got["tuple"] == (1, 2)  # opaque at the top level: exactly as it left
    assert got["nested"] == {"t": [1, 2], "s": 1.5}  # inside a dict: msgspec's rules
    assert type(got["nested"]["s"]) is np.float32  # (what msgspec cannot encode: its pickle)
    array = got["array"]
    assert (
        np.isfortran(array) and array.flags.writeable and array.tolist() == [[0, 1, 2], [3, 4, 5]]
    )
    oip = got["oip"]
    assert type(oip) is InferenceResponse and type(oip.outputs[0]) is ResponseOutput
    np.testing.assert_array_equal(oip.outputs[0].data, np.ones(2, np.float32))


def test_worker_processes_die_with_a_killed_server(tmp_path: Path) -> None:
    """The server is SIGKILLed (no clean-up at all): its worker processes exit too."""
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.py").write_text(ECHO.replace("\nclass", "import os\nclass", 1))
    (folder / "config.yaml").write_text("workers: process\nmin_workers: 2\n")
    script = textwrap.dedent(
        f"""
        import asyncio, sys, time
        from concurrent.futures import ThreadPoolExecutor
        from pathlib import Path
        from podium.model.discovery import discover_all
        from podium.runtime.loading import build_version
        async def main():
            found, _ = discover_all(Path({str(folder)!r}))
            mv = build_version(found[0], secrets={{}}, executor=ThreadPoolExecutor(2))
            await mv.load()
            print(" ".join(str(w.pid) for w in mv.workers()), flush=True)
            await asyncio.sleep(60)
        asyncio.run(main())
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert len(pids) == 2 and all(_alive(p) for p in pids)
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    for _ in range(500):
        if not any(_alive(p) for p in pids):
            break
        import time

        time.sleep(0.01)
    assert not any(_alive(p) for p in pids)


def _imported(path: Path, package: str) -> set[str]:
    """The podium modules ``path`` (a module of ``package``) imports, relative ones resolved."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("podium"))
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            if node.level == 0:
                base = []
            module = ".".join([*base, *([node.module] if node.module else [])])
            if module.startswith("podium"):
                names = [] if node.module else [a.name for a in node.names]
                found.update([f"{module}.{n}" for n in names] or [module])
    return found


def test_the_process_package_imports_nothing_above_the_execution_layer() -> None:
    """Neither side of a process worker imports the scheduling, registry or loading layers, a
    front end, or another package's private module: what the worker process needs from above
    comes by reference in its Init message."""
    package = podium.runtime.process.__name__
    allowed = {
        "podium.config",
        "podium.errors",
        "podium.metrics",
        "podium.types",
        "podium.logs",  # foundations: a worker process logs as the server does
        "podium.heap",  # foundations: a worker process settles its heap as the server does
        "podium.tracing",  # foundations: the span around a process worker's call
        "podium.turn",  # foundations: frames leave once per turn of the loop
        "podium.sched",  # foundations: its model threads run under SCHED_BATCH as the server's
        "podium.model",
        "podium.model.discovery",
        "podium.runtime.workers",
        "podium.runtime._stats",  # the execution layer's counters
        "podium.runtime.devices",  # the execution layer's devices: a worker's environment
    }
    for path in Path(podium.runtime.process.__file__).parent.glob("*.py"):
        for module in _imported(path, package):
            assert module in allowed or module.startswith(package + "."), (
                f"{path.name} imports {module}"
            )
