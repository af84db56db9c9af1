"""Process workers, the worker's side: ``python -m podium.runtime.process FD PARENT_PID``.

The worker reads its orders from the socket ``FD`` (``_messages``). The first, :class:`Init`,
says what to build and hands over, by reference, what comes from above the execution layer: the
host factory, which builds the model from its ``ModelSource`` (every contract) and the scheduler
that runs one request through it (``preprocess`` and ``postprocess`` outside the
``predict_concurrency`` slots), and the function that rebuilds a front end's request. Streams go
through a window of ``stream_buffer`` items that the server's reader refills (back-pressure);
async work is cancelled and generators closed when the server says the client left.

What the worker counts (preprocess, predict, postprocess) and what the model records of its
own metrics (``podium.metrics``, TorchServe's ``context.metrics``, ``mlserver.log``) reach the
server in :class:`Report` messages: the model's metrics before the answer to the request that
recorded them, the counters at most every :data:`REPORT_EVERY` seconds (before an answer, or on
a periodic tick), so the server's totals survive the worker process.

Requests queued ahead (where the server sends them, :func:`~._messages.queues_ahead`) wait here
in order and start at most ``predict_concurrency`` at a time, each only after the answer of the
one it waited for has been written: so the server knows which requests a crash had not started.
What is written in one turn of the event loop leaves in one write.

It never outlives the server: it exits when its socket reaches EOF (the server closed it or
died), and on Linux the kernel kills it if the server dies (``PR_SET_PDEATHSIG``). It ignores
SIGINT and runs in its own session: the server decides when it stops.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ctypes
import logging
import os
import pickle
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from ... import heap, logs, sched
from ...config import Secrets
from ...errors import ModelError, PodiumError
from ...metrics import MetricStore, recording_to
from ...model import model_error
from ...types import ModelInstance, RequestInfo, current_request
from .._stats import postprocess, preprocess
from ._messages import (
    Answer,
    Batch,
    Cancel,
    Credit,
    End,
    EnvSecrets,
    Error,
    Failed,
    Infer,
    Init,
    Item,
    Message,
    Ready,
    Report,
    Results,
    StartFailed,
    Step,
    Unvalidated,
    queues_ahead,
)
from ._remote import Connection
from ._steps import ChildSteps
from ._wire import Encoder, Ring

__all__ = ["main"]

logger = logging.getLogger("podium.worker")

#: Seconds a model's unload hook may take when its worker process is stopped.
UNLOAD_GRACE = 5.0
#: Seconds between two reports of the worker's counters (at most; a tick sends what is left).
REPORT_EVERY = 0.05
#: Seconds between two periodic reports.
REPORT_TICK = 1.0


def _die_with_parent(parent: int) -> None:
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # it died before we asked to follow it
        os._exit(0)


class _Request:
    """A request the worker has begun: its task, what its rebuilt request objects wait on to
    see the client leave (``gone``; only where one came), a stream's window (how many more
    items the server's reader will take: its buffer's free room)."""

    __slots__ = ("task", "gone", "window", "ran")

    def __init__(self, gone: asyncio.Event | None, window: asyncio.Semaphore | None) -> None:
        self.task: asyncio.Task[None] | None = None
        self.gone = gone
        self.window = window
        self.ran = False  # its task began: it answers itself


class Child(Connection):
    """The worker process's end of the socket: builds the model on Init, serves requests;
    ``closed`` is set when the socket closes."""

    def __init__(self, closed: asyncio.Event) -> None:
        super().__init__(self._on_message, closed.set)  # a ring for large buffers on Init.shm
        self._requests: dict[int, _Request] = {}
        self._setup: asyncio.Task[None] | None = None
        self.instance: Any = None
        self.runner: Any = None  # a Runner, once built
        #: predict_concurrency for batches (which this process runs through the instance itself)
        self.slots: Any = None
        self.rebuild: Callable[[Any, Callable[[], Awaitable[Any]]], Any] | None = None
        self.name = "?"
        self.stream_buffer = 16
        #: the model's own metrics, reported to the server
        self.metrics = MetricStore(forward=True)
        self._reported = 0.0
        self._tick: asyncio.TimerHandle | None = None
        # requests queued ahead: started in order, at most ``_limit`` running (``_gated``)
        self._gated = False
        self._limit = 1
        self._active = 0
        self._waiting: collections.deque[Infer | Batch] = collections.deque()
        self._steps: ChildSteps | None = None  # a continuous model's generations
        self._stepping: asyncio.Task[None] | None = None  # the step running (one at a time)

    # -- requests queued ahead --------------------------------------------------------------

    def _write(self, messages: list[list[bytes | memoryview]]) -> None:
        super()._write(messages)
        self._start_waiting()  # queued requests start only once the answers before them left

    def _start_waiting(self) -> None:
        waiting = self._waiting
        while waiting and self._active < self._limit:
            self._begin(waiting.popleft())

    def _begin(self, message: Infer | Batch) -> None:
        if isinstance(message, Batch):
            snapshots = any(r is not None for r in message.requests)
        else:
            snapshots = message.request is not None
        window = (
            asyncio.Semaphore(self.stream_buffer)
            if type(message) is Infer and message.stream
            else None
        )
        request = _Request(asyncio.Event() if snapshots else None, window)
        self._active += 1
        self._requests[message.cid] = request
        request.task = asyncio.get_running_loop().create_task(self._run(message, request))

    def _on_message(self, message: Message) -> None:
        match message:
            case Infer() | Batch():
                if self._gated and (self._waiting or self._active >= self._limit):
                    self._waiting.append(message)  # queued ahead: starts in its turn
                else:
                    self._begin(message)
            case Step():
                self._stepping = asyncio.get_running_loop().create_task(self._step(message))
            case Cancel():
                cid = message.cid
                request = self._requests.get(cid)
                if request is not None:
                    if request.gone is not None:
                        request.gone.set()
                    assert request.task is not None
                    request.task.cancel()
                    if not request.ran:  # its task has not begun (the Cancel came in the same
                        self.send(End(cid))  # read): its body, which answers, never runs
                        self._end(cid)
                elif self._waiting:
                    for queued in self._waiting:
                        if queued.cid == cid:  # queued ahead: it never starts
                            self._waiting.remove(queued)
                            self.send(End(cid))
                            break
            case Credit():
                request = self._requests.get(message.cid)
                if request is not None and request.window is not None:
                    for _ in range(message.n):
                        request.window.release()
            case Init():
                self._setup = asyncio.get_running_loop().create_task(self._start(message))

    # -- building the model ----------------------------------------------------------------

    async def _start(self, init: Init) -> None:
        config = init.source.config
        if init.shm:
            self.encoder = Encoder(Ring(f"{init.shm}-c"))
        self.name = config.name
        self.stream_buffer = config.stream_buffer
        # The server's format, bounded, each line naming this worker and the request it is about.
        pid = os.getpid()
        logs.configure(
            init.log_level,
            init.log_format,
            tag=f"worker {init.worker} pid {pid}",
            static={"worker": init.worker, "pid": pid}
            | ({"device": init.device} if init.device else {}),
        )
        secrets = init.secrets
        if isinstance(secrets, EnvSecrets):
            secrets = Secrets(secrets.directory)
        executor = ThreadPoolExecutor(
            init.threads, thread_name_prefix="podium-model", initializer=sched.batch_this_thread
        )
        try:
            with recording_to(self.metrics):
                instance, runner = await init.host(init.source, secrets, executor)
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}"
            if isinstance(exc, PodiumError):
                reason = exc.message
            logger.error("model '%s' could not start in a worker process: %s", self.name, reason)
            self.send(StartFailed(reason))
            return
        self.instance = instance
        self.runner = runner
        self.slots = asyncio.Semaphore(config.predict_concurrency)
        self.rebuild = init.rebuild
        self._gated = queues_ahead(instance.capabilities)
        if instance.capabilities.continuous:
            self._steps = ChildSteps(instance, runner.stats, self.name, self.rebuild)
        self._limit = config.predict_concurrency
        self.report(force=True)  # what load() recorded
        heap.settle()  # the model is built: frozen, and no collections for requests in flight
        try:
            ready = _ready(instance)
        except Exception as exc:  # a tokenizer that cannot be pickled
            reason = (
                f"model '{self.name}' generates on OpenAI's API, but its tokenizer cannot be "
                f"sent to the server from its worker process: {type(exc).__name__}: {exc}"
            )
            logger.error("%s", reason)
            self.send(StartFailed(reason))
            return
        self.send(ready)
        self._tick = asyncio.get_running_loop().call_later(REPORT_TICK, self._on_tick)

    # -- reports -----------------------------------------------------------------------------

    def report(self, force: bool = False) -> None:
        """Send what the counters and the model's metrics added since the last report: the
        metrics whenever they changed, the counters at most every REPORT_EVERY s (``force``:
        now)."""
        metrics = self.metrics
        now = time.monotonic()
        if not (force or metrics.dirty or now - self._reported >= REPORT_EVERY):
            return
        self._reported = now
        stats = getattr(self.runner, "stats", None)
        compute = None if stats is None else stats.take_compute()
        taken = metrics.take() if metrics.dirty else []
        if compute is not None or taken:
            self.send(Report(compute, taken))

    def _on_tick(self) -> None:
        self.report(force=True)
        self._tick = asyncio.get_running_loop().call_later(REPORT_TICK, self._on_tick)

    # -- serving ---------------------------------------------------------------------------

    def _request(self, snapshot: Any, gone: asyncio.Event | None) -> Any:
        if snapshot is None or self.rebuild is None or gone is None:
            return None
        return self.rebuild(snapshot, gone.wait)

    def _validated(self, inputs: Any) -> Any:
        if isinstance(inputs, Unvalidated):
            return self.instance.validate(inputs.value)
        return inputs

    def _reply(self, message: Answer | Item | Results) -> None:
        try:
            self.send(message)
        except Exception as exc:  # the value cannot be encoded (nor pickled)
            error = ModelError(
                f"model '{self.name}' returned a value that cannot be sent back from its "
                f"worker process ({type(message.value).__name__}): {exc}"
            )
            self.send(Error(message.cid, Failed.of(error)))

    async def _run(self, message: Infer | Batch, state: _Request) -> None:
        cid = message.cid
        gone = state.gone
        state.ran = True
        if not isinstance(message, Batch) and message.request_id is not None:
            current_request.set(RequestInfo(message.request_id))  # this request's own task
        try:
            match message:
                case Infer(stream=False):
                    request = self._request(message.request, gone)
                    inputs = self._validated(message.inputs)
                    outputs = await self.runner.infer(inputs, request)
                    self.report()
                    self._reply(Answer(cid, outputs))
                case Infer():
                    request = self._request(message.request, gone)
                    items = self.runner.stream(self._validated(message.inputs), request)
                    window = state.window
                    assert window is not None
                    try:
                        async for item in items:
                            await window.acquire()
                            self._reply(Item(cid, item))
                    finally:
                        await items.aclose()
                    self.report()
                    self.send(End(cid))
                case Batch():
                    requests = [self._request(s, gone) for s in message.requests]
                    results = await self._run_batch(message.inputs, requests)
                    self.report()
                    # a value per request, each encoded by its own type (else the model's own
                    # answer, which the server names as the wrong shape)
                    self._reply(
                        Results(cid, results) if type(results) is list else Answer(cid, results)
                    )
        except asyncio.CancelledError:
            self.report()
            self.send(End(cid))
        except Exception as exc:
            self.report()
            # (no local keeps the error: its traceback holds this frame, a cycle)
            self.send(Error(cid, Failed.of(model_error(self.name, message.op, exc))))
        finally:
            self._end(cid)

    async def _step(self, message: Step) -> None:
        """One step of the continuous batch (``_steps``); its answer leaves at once."""
        cid = message.cid
        try:
            if self._steps is None:
                raise ModelError(f"model '{self.name}' is not served by continuous batching")
            reply = await self._steps.run(message)
            self.report()
            try:
                self.send(reply)
            except Exception as exc:  # an item that cannot be encoded (nor pickled)
                raise ModelError(
                    f"model '{self.name}' emitted an item that cannot be sent back from its "
                    f"worker process: {exc}"
                ) from exc
        except Exception as exc:
            if self._steps is not None:  # the server fails them all: nothing of theirs stays
                self._steps.drop(message.batch)
            self.report()
            self.send(Error(cid, Failed.of(model_error(self.name, "step", exc))))
        self.out.flush()

    def _end(self, cid: int) -> None:
        """Its answer is queued to leave; the next request starts after the write (``_write``).
        With nothing else running, nothing else would join this turn's write: it leaves now, and
        the next queued request starts now (a turn of the loop sooner)."""
        self._requests.pop(cid, None)
        self._active -= 1
        if not self._active:
            self.out.flush()
            self._start_waiting()

    async def _run_batch(self, inputs: list[Any], requests: list[Any]) -> list[Any]:
        inst = self.instance
        caps = inst.capabilities
        stats = self.runner.stats
        n = len(inputs)
        failed: list[Any] = [None] * n

        async def pre(i: int) -> Any:
            try:
                value = self._validated(inputs[i])
                if caps.has_preprocess:
                    value = await preprocess(stats, inst, value, requests[i])
                return value
            except Exception as exc:
                failed[i] = Failed.of(exc)
                return None

        values = list(await asyncio.gather(*(pre(i) for i in range(n))))
        live = [i for i in range(n) if failed[i] is None]
        if not live:
            return failed
        async with self.slots:
            start = time.perf_counter_ns()
            outputs = await inst.predict([values[i] for i in live], [requests[i] for i in live])
            stats.executed(len(live), time.perf_counter_ns() - start)
        if not isinstance(outputs, list | tuple) or len(outputs) != len(live):
            return outputs  # the server checks the shape and names the problem
        results: list[Any] = list(failed)
        for i, out in zip(live, outputs, strict=True):
            results[i] = out

        async def post(i: int) -> None:
            try:
                results[i] = await postprocess(stats, inst, results[i], requests[i])
            except Exception as exc:
                results[i] = Failed.of(exc)

        if caps.has_postprocess:
            await asyncio.gather(*(post(i) for i in live))
        return results


def _ready(instance: ModelInstance) -> Ready:
    """What the server learns of the model (a generating model's tokenizer too: the front end
    tokenizes and detokenizes, the worker process runs the steps)."""
    face = getattr(instance, "openai", None)
    generates = face is not None and getattr(face, "generates", False)
    pickled = pickle.dumps(face, protocol=5) if generates else None
    return Ready(replace(instance.capabilities, input_schema=None), pickled)


async def _serve(sock: socket.socket) -> None:
    loop = asyncio.get_running_loop()
    closed = asyncio.Event()
    child = Child(closed)
    await loop.create_unix_connection(lambda: child, sock=sock)
    await closed.wait()
    # The model's own unload hook (an MLServer runtime's unload()), bounded.
    close = getattr(child.instance, "close", None)
    if close is not None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(close(), UNLOAD_GRACE)
    # The server closed the socket (or died). Threads running sync model code cannot be
    # stopped, and asyncio.run would wait for them: leave at once (the log lines held for this
    # turn of the loop written first).
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main(argv: list[str]) -> None:
    """Serve the socket ``argv[0]`` (a file descriptor) until it closes; ``argv[1]`` is the
    server's pid, which this process follows in death."""
    fd, parent = int(argv[0]), int(argv[1])
    _die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sock = socket.socket(fileno=fd)
    try:
        import uvloop

        runner: Any = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a dependency
        runner = asyncio.run
    runner(_serve(sock))
