"""Execution: the instances (workers) of one model version, in the server or in worker processes.

A :class:`WorkerPool` runs ``min_workers`` workers of one kind and puts them behind one
:class:`~podium.runtime._gate.WorkerGate` (the least-loaded ready worker gets the next request;
one bounded FIFO line for all). Schedulers take a slot from the gate and hand the request to
the worker they got; the worker gives the slot back when its instance is done with it.

- ``thread`` workers (:class:`~podium.runtime._thread_worker.ThreadWorker`): instances in the
  server process. The scheduler runs ``preprocess`` / ``postprocess`` outside the slots itself;
  the worker runs ``predict``.
- ``process`` workers (:class:`podium.runtime.process.ProcessWorker`): one instance per worker
  process, which runs the whole ``preprocess`` → ``predict`` → ``postprocess`` (that package
  builds on this module; this one does not import it).

What every worker is (:class:`Worker`, its kinds and states) is in ``_worker``; this module
re-exports it.

The pool restarts workers that die (with a back-off), retires workers on ``scale`` once they have
finished what they hold, and replaces a worker whose predict ran past ``response_timeout``. It
says when that is not enough (:meth:`WorkerPool.trouble`): every worker stuck, workers lost
again and again, or out of device memory again and again; the version is then reported not
ready, with the reason.

Devices (docs/devices.md): each worker is given a device group by the pool's
:class:`~podium.runtime.devices.DeviceAssigner` when it is made (its model is built and loaded
under ``podium.device()``), keeps it for life, and hands it to its replacement when it is
replaced. A worker whose device is lost (:class:`DeviceLost`) is replaced, with the back-off of
a crash.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import gc
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ..devices import empty_cache, using
from ..errors import (
    DeviceLost,
    DeviceOutOfMemory,
    InvalidInput,
    ModelNotReady,
    Unavailable,
    model_label,
)
from ..metrics import recording_to
from ..types import ModelInstance
from ._clock import TaskSet
from ._device_share import DeviceShares
from ._gate import WorkerGate
from ._stats import RestartReason, VersionStats
from ._thread_worker import ThreadWorker, worker_ahead
from ._worker import (
    STUCK_GRACE,
    Failure,
    Moved,
    RequestCodec,
    Worker,
    WorkerInfo,
    WorkerKind,
    WorkerState,
    queue_ahead,
)
from .devices import DeviceAssigner, Group, describe_group

__all__ = [
    "Failure",
    "Moved",
    "RequestCodec",
    "ThreadWorker",
    "Worker",
    "WorkerInfo",
    "WorkerKind",
    "WorkerPool",
    "WorkerState",
    "queue_ahead",
    "thread_pool",
]

logger = logging.getLogger("podium.workers")

#: Restart back-off: first delay, ceiling, and how many failed starts in a row fail the version.
BACKOFF_FIRST = 0.1
BACKOFF_MAX = 5.0
MAX_START_FAILURES = 5
#: A worker that lived at least this long before dying resets the back-off.
STABLE_AFTER = 10.0
#: Workers lost (died, killed past response_timeout, replaced when stuck) this many times within
#: RESTART_WINDOW seconds: the version is crash-looping (:meth:`WorkerPool.trouble`).
RESTART_LIMIT = 5
RESTART_WINDOW = 60.0

_LIVE = (WorkerState.STARTING, WorkerState.READY)


#: Out-of-memory errors on a version's devices this many times within OOM_WINDOW seconds: the
#: version is reported not ready (:meth:`WorkerPool.trouble`) until the window holds fewer.
OOM_LIMIT = 5
OOM_WINDOW = 60.0

#: ``new_worker(id, group)``: a worker, not started yet, for the devices of ``group``.
WorkerFactory = Callable[[str, Group], Awaitable[Worker]]


class WorkerPool:
    """The workers of one model version: started, restarted, scaled and stopped here.

    ``new_worker(id)`` makes a worker that has not started yet; ``instance`` is the version's
    descriptor (what the front ends read: its ``capabilities``) and, for thread
    workers, the instance ``preprocess`` runs on.
    """

    def __init__(
        self,
        *,
        model: str,
        label: str,
        kind: WorkerKind,
        instance: ModelInstance,
        new_worker: WorkerFactory,
        min_workers: int,
        max_workers: int,
        max_waiting: int,
        slots_per_worker: int = 1,
        stats: VersionStats | None = None,
        devices: DeviceAssigner | None = None,
    ) -> None:
        self.model = model
        #: which worker runs on which device (the CPU alone, unless given)
        self.devices = devices if devices is not None else DeviceAssigner(((),))
        #: the version's counters (what its workers and schedulers record; metrics read them)
        self.stats = stats if stats is not None else VersionStats()
        self.slots_per_worker = slots_per_worker
        self.label = label
        self.kind = kind
        self.instance = instance
        self.gate = WorkerGate(model, max_waiting)
        self.min_workers = min_workers
        self.max_workers = max(max_workers, min_workers, 1)
        self._new_worker = new_worker
        self._workers: list[Worker] = []
        self._count = 0
        self._lock = asyncio.Lock()
        self._tasks = TaskSet(logger)  # restarts and retirements
        self._failures = 0  # deaths and failed starts in a row: the back-off
        self._start_failures = 0  # failed starts in a row: giving up
        # workers lost lately (monotonic time, what happened), for trouble()
        self._losses: collections.deque[tuple[float, str]] = collections.deque(maxlen=RESTART_LIMIT)
        # out-of-memory errors lately (monotonic time, device), for trouble()
        self._ooms: collections.deque[tuple[float, str]] = collections.deque(maxlen=OOM_LIMIT)
        # replaced workers (id → why) whose device group went to their replacement
        self._replaced: dict[str, str] = {}
        self._closing = False
        self._started = False
        #: called with the reason when workers cannot be (re)started: the version has failed
        self.on_failed: Callable[[str], None] | None = None
        #: called when a worker leaves for good (it died, was replaced when stuck, or retired),
        #: with what happened ("died", ...): a scheduler that pins work to a worker (stateful
        #: sequences) closes what it held there
        self.on_worker_lost: Callable[[Worker, str], None] | None = None

    @classmethod
    def single(
        cls,
        instance: ModelInstance,
        *,
        model: str,
        concurrency: int,
        max_waiting: int,
        stream_buffer: int = 16,
    ) -> WorkerPool:
        """One thread worker over an instance that is already loaded (schedulers built directly,
        and the scheduler inside a worker process)."""
        pool = cls(
            model=model,
            label=f"model '{model}'",
            kind=WorkerKind.THREAD,
            instance=instance,
            new_worker=_no_more_workers,
            min_workers=1,
            max_workers=1,
            max_waiting=max_waiting,
        )
        worker = ThreadWorker(
            "1",
            instance,
            gate=pool.gate,
            capacity=concurrency,
            label=pool.label,
            stream_buffer=stream_buffer,
            loaded=True,
            stats=pool.stats,
        )
        worker.state = WorkerState.READY
        pool._workers.append(worker)
        pool._count = 1
        pool._started = True
        pool.gate.add(worker)
        return pool

    @classmethod
    def for_config(
        cls,
        config: Any,
        kind: WorkerKind,
        instance: Any,
        new_worker: WorkerFactory,
        stats: VersionStats | None = None,
        devices: DeviceAssigner | None = None,
    ) -> WorkerPool:
        """The pool a model's config asks for: its workers, slots and waiting line; with
        ``workers_per_device``, that many workers on each of its device groups."""
        label = model_label(config.name, config.version)
        low, high = config.min_workers, config.max_workers
        if devices is not None and devices.workers:
            low = high = devices.workers
        pool = cls(
            model=config.name,
            label=label,
            kind=kind,
            instance=instance,
            new_worker=new_worker,
            min_workers=low,
            max_workers=high,
            max_waiting=config.max_queue_size,
            slots_per_worker=config.predict_concurrency,
            stats=stats,
            devices=devices,
        )
        if config.predict_concurrency_per == "device" and any(pool.devices.groups):
            pool.gate.shares = DeviceShares(config.predict_concurrency, lambda: pool._workers)
        return pool

    # -- views -----------------------------------------------------------------------------

    def infos(self) -> list[WorkerInfo]:
        name = self.devices.name
        return [
            WorkerInfo(w.id, w.pid, w.kind, w.state, w.busy, w.started, w.devices, name(w.devices))
            for w in self._workers
        ]

    def statistics(self) -> dict[str, int]:
        """Slots of the ready workers, requests held by any worker, requests in the line."""
        if not self._started:  # not loaded yet: the slots it will have
            slots = self.min_workers * self.slots_per_worker
        else:
            ready = [w for w in self._workers if w.state is WorkerState.READY]
            shares = self.gate.shares  # (workers sharing a GPU share its slots)
            slots = sum(w.capacity for w in ready) if shares is None else shares.slots(ready)
        return {
            "slots": slots,
            "busy": sum(w.busy for w in self._workers),
            "waiting": self.gate.waiting,
        }

    def counts(self) -> dict[str, int]:
        """Workers running (starting or ready) and ready."""
        live = self._live()
        ready = sum(w.state is WorkerState.READY for w in live)
        return {"workers": len(live), "ready_workers": ready}

    def trouble(self) -> str:
        """Why the workers do not serve well, or ``""``: workers lost RESTART_LIMIT times within
        RESTART_WINDOW seconds (crash-looping; it clears once the window holds fewer), or every
        ready worker with all its slots held by calls stuck past ``response_timeout``."""
        # (each deque holds the last LIMIT events: all are recent when the oldest is)
        losses = self._losses
        if len(losses) >= RESTART_LIMIT and losses[0][0] >= time.monotonic() - RESTART_WINDOW:
            return (
                f"crash-looping: {len(losses)} workers lost in the last "
                f"{RESTART_WINDOW:g} s (the last: {losses[-1][1]})"
            )
        ooms = self._ooms
        if len(ooms) >= OOM_LIMIT and ooms[0][0] >= time.monotonic() - OOM_WINDOW:
            return (
                f"out of device memory {len(ooms)} times in the last {OOM_WINDOW:g} s "
                f"(the last on {ooms[-1][1]})"
            )
        ready = [w for w in self._workers if w.state is WorkerState.READY]
        if not ready:
            return ""
        stuck = [w.stuck() for w in ready]
        if all(n >= w.capacity for n, w in zip(stuck, ready, strict=True)):
            return (
                f"every worker is stuck: {sum(stuck)} call(s) still running more than "
                f"{STUCK_GRACE:g} s past response_timeout"
            )
        return ""

    def preprocessor(self) -> ModelInstance:
        """The instance a thread version's ``preprocess`` runs on: the least-loaded ready one."""
        best = None
        for w in self.gate.workers:
            if best is None or w.busy < best.busy:
                best = w
        return self.instance if best is None else best.instance

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Start ``min_workers`` workers and return once they are ready; raises what made the
        first one fail (the version is then FAILED). ``min_workers`` 0 starts none."""
        async with self._lock:
            self._closing = False
            self._failures = self._start_failures = 0
            missing = self.min_workers - len(self._live())
            if missing > 0:
                await asyncio.gather(*(self._start_one() for _ in range(missing)))
            self._started = True

    def _live(self) -> list[Worker]:
        return [w for w in self._workers if w.state in _LIVE]

    async def _start_one(self) -> Worker:
        self._count += 1
        wid = str(self._count)
        group = self.devices.take(wid)
        # What the model's code creates while it is built and loaded records to this version;
        # podium.device() there is the worker's device.
        try:
            with recording_to(self.stats.custom), using(self.devices.name(group)):
                worker = await self._new_worker(wid, group)
        except BaseException:
            self.devices.vacate(wid)  # the next try starts there
            raise
        self._workers.append(worker)
        self.gate.starting += 1
        try:
            with recording_to(self.stats.custom), using(self.devices.name(group)):
                await worker.start()
        except BaseException:
            worker.state = WorkerState.DEAD
            self._workers.remove(worker)
            self.devices.vacate(wid)
            raise
        finally:
            self.gate.starting -= 1
        if self._closing:
            await worker.close()
            raise Unavailable(f"{self.label} is stopping")
        self.gate.add(worker)
        logger.info(
            "%s: %s worker %s is ready (pid %s, %s)",
            self.label,
            self.kind,
            worker.id,
            worker.pid,
            describe_group(group),
        )
        return worker

    async def scale(self, min_workers: int, max_workers: int | None = None) -> None:
        """Run ``min_workers`` workers (``max_workers``: the ceiling, default unchanged or min).

        Returns once the version runs that many: new workers are ready, removed workers have
        finished what they held (they take no new work from the moment they are chosen).
        """
        if max_workers is None:
            max_workers = max(self.max_workers, min_workers, 1)
        for name, value in (("min_worker", min_workers), ("max_worker", max_workers)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidInput(f"{self.label}: {name} must be an integer >= 0, got {value!r}")
        if max_workers < 1 or min_workers > max_workers:
            raise InvalidInput(
                f"{self.label}: need 0 <= min_worker <= max_worker and max_worker >= 1, got "
                f"min_worker {min_workers}, max_worker {max_workers}"
            )
        async with self._lock:
            self.min_workers, self.max_workers = min_workers, max_workers
            live = self._live()
            if len(live) < min_workers:
                await asyncio.gather(*(self._start_one() for _ in range(min_workers - len(live))))
            elif len(live) > min_workers:
                # the least busy go first; newest first among equals
                victims = sorted(live, key=lambda w: (w.busy, -int(w.id)))[
                    : len(live) - min_workers
                ]
                await asyncio.gather(*(self._retire(w) for w in victims))

    def _report_lost(self, worker: Worker, how: str) -> None:
        if self.on_worker_lost is not None:
            self.on_worker_lost(worker, how)

    async def _retire(self, worker: Worker, how: str = "was stopped (scaled down)") -> None:
        worker.state = WorkerState.STOPPING
        self.gate.remove(worker)
        if how:
            self._report_lost(worker, how)
        await self.gate.idle(worker)
        await worker.close()
        worker.state = WorkerState.DEAD
        if worker in self._workers:
            self._workers.remove(worker)
        self._replaced.pop(worker.id, None)
        self.devices.release(worker.id)  # (a replaced one's went to the new one: nothing to do)
        release_device_memory(worker)
        logger.info("%s: %s worker %s stopped", self.label, self.kind, worker.id)

    def worker_exited(self, worker: Worker, reason: str, *, crashed: bool, lived: float) -> None:
        """A worker died (crash, kill, timeout recycling): replace it unless we are closing."""
        self.gate.remove(worker)
        worker.state = WorkerState.DEAD
        if worker in self._workers:
            self._workers.remove(worker)
        if self._closing:
            self.devices.release(worker.id)
            return
        lost = self._replaced.pop(worker.id, None)  # its device was lost
        if crashed or lost is not None:
            logger.error("%s: %s", self.label, reason if lost is None else lost)
            self._failures = 0 if lived >= STABLE_AFTER else self._failures + 1
        if lost is not None:
            why = RestartReason.DEVICE_LOST
        else:
            why = RestartReason.CRASHED if crashed else RestartReason.RESPONSE_TIMEOUT
        self._lose(worker, "died", reason if lost is None else f"{reason}: {lost}", why)

    def device_error(self, worker: Worker, exc: BaseException) -> None:
        """A call on ``worker`` failed on its device: an out-of-memory error is counted (the
        worker serves on: the request failed alone); a lost device gets the worker replaced on
        the same device, with a crash's back-off."""
        where = self.devices.name(self.devices.of(worker.id) or ())
        if isinstance(exc, DeviceOutOfMemory):
            self._ooms.append((time.monotonic(), where))
            self.stats.out_of_memory_on(where)
            return
        if not isinstance(exc, DeviceLost) or worker.state is not WorkerState.READY:
            return
        why = f"{self.kind} worker {worker.id} lost its device {where}"
        if worker.id in self._replaced:
            return
        self._replaced[worker.id] = why
        self.stats.device_lost(where)
        if worker.kind is WorkerKind.PROCESS:
            recycle = getattr(worker, "recycle", None)
            if recycle is not None:
                recycle(why)  # it dies; worker_exited replaces it
            return
        # a thread worker: no new work; a fresh instance on the same device replaces it
        logger.error("%s: %s (%s); replacing it", self.label, why, exc)
        lived = time.time() - worker.started
        self._failures = 0 if lived >= STABLE_AFTER else self._failures + 1
        self._lose(worker, "died (its device was lost)", why, RestartReason.DEVICE_LOST, True)

    def _replace_stuck(self, worker: ThreadWorker) -> None:
        """A thread worker's predict outlived its timeout: it takes no new work, a fresh instance
        replaces it, and it is dropped once the stuck call returns."""
        logger.warning(
            "%s: thread worker %s is stuck past response_timeout; replacing it",
            self.label,
            worker.id,
        )
        what = "stuck past response_timeout, replaced"
        loss = f"thread worker {worker.id} {what}"
        self._lose(worker, f"died ({what})", loss, RestartReason.RESPONSE_TIMEOUT, True)

    def _lose(
        self, worker: Worker, how: str, loss: str, why: RestartReason, retire: bool = False
    ) -> None:
        """``worker`` is lost (``how``, for the schedulers; ``loss``, for :meth:`trouble`):
        its replacement starts, on its device. ``retire``: a thread worker that cannot go on
        takes no new work, and is dropped once what it holds has ended."""
        if retire:
            worker.state = WorkerState.STOPPING
        self.gate.remove(worker)
        self.devices.vacate(worker.id)
        self._report_lost(worker, how)
        self._losses.append((time.monotonic(), loss))
        self.stats.restarted(why)
        self._spawn_replace()
        if retire:
            self._tasks.spawn(self._retire(worker, how=""), f"retiring worker {worker.id}")

    def _spawn_replace(self) -> None:
        # Counted as starting from now on: requests arriving before the replacement task runs
        # wait for it instead of being told there are no workers.
        self.gate.starting += 1
        self._tasks.spawn(self._replace(), f"restarting a worker of {self.label}")

    async def _replace(self) -> None:
        try:
            await self._restore()
        finally:
            self.gate.starting -= 1

    async def _restore(self) -> None:
        """Bring the pool back to min_workers, backing off on repeated failures."""
        while not self._closing and len(self._live()) < self.min_workers:
            if self._failures:
                delay = min(BACKOFF_FIRST * 2 ** (self._failures - 1), BACKOFF_MAX)
                self.gate.starting += 1  # requests keep waiting for the worker to come
                try:
                    await asyncio.sleep(delay)
                finally:
                    self.gate.starting -= 1
                if self._closing:
                    return
            try:
                async with self._lock:
                    if len(self._live()) >= self.min_workers:
                        return
                    await self._start_one()
                    self._start_failures = 0
            except Exception as exc:
                self._failures += 1
                self._start_failures += 1
                tries = self._start_failures
                reason = f"restarting a {self.kind} worker failed: {exc}"
                logger.error("%s: %s (attempt %d)", self.label, reason, tries)
                if tries >= MAX_START_FAILURES:
                    reason = f"{reason}; gave up after {tries} attempts in a row"
                    self.gate.fail_waiters(ModelNotReady(f"{self.label} is not ready: {reason}"))
                    if self.on_failed is not None:
                        self.on_failed(reason)
                    return

    async def close(self) -> None:
        """Stop every worker (worker processes: asked to exit, killed after a bound)."""
        self._closing = True
        await self._tasks.cancel()
        self.gate.fail_waiters(Unavailable(f"{self.label} is stopped"))
        workers, self._workers = list(self._workers), []
        for worker in workers:
            self.gate.remove(worker)
        with contextlib.suppress(Exception):
            await asyncio.gather(*(w.close() for w in workers), return_exceptions=True)
        for worker in workers:
            self.devices.release(worker.id)
            release_device_memory(worker)
        self.devices.forget_vacated()
        self._replaced.clear()


def release_device_memory(worker: Worker) -> None:
    """A thread worker that has left: its instance goes (the pool's last reference to it) and
    the framework's device cache is emptied, so its GPU memory returns. A worker process frees
    its memory by exiting."""
    if worker.kind is WorkerKind.THREAD and bool(getattr(worker, "devices", None)):
        worker.instance = None  # type: ignore[assignment]
        gc.collect()
        empty_cache()


async def _no_more_workers(wid: str, group: Group) -> Worker:
    raise Unavailable("this pool runs one given instance and cannot start more workers")


def thread_pool(
    source: Any,
    instance: ModelInstance,
    *,
    build: Callable[[], ModelInstance],
    executor: Any,
    stats: VersionStats | None = None,
    assigner: DeviceAssigner | None = None,
) -> WorkerPool:
    """A pool of thread workers: ``instance`` (already built, under ``podium.device()`` of the
    first device group) is the first worker's; more are made with ``build`` (the model's
    ``__init__``) in ``executor``. ``stats``: the version's counters; ``assigner``: the
    devices its workers run on (the CPU alone, unless given)."""
    config = source.config
    spare = [instance]

    async def new_worker(wid: str, group: Group) -> Worker:
        # the first instance was built (by the caller) for the first group
        if spare and group == pool.devices.groups[0]:
            made = spare.pop()
        else:
            # in this task's context: the metrics its __init__ creates are the version's
            run = contextvars.copy_context().run
            made = await asyncio.get_running_loop().run_in_executor(executor, run, build)
        slots = config.predict_concurrency
        ahead = worker_ahead(config, made)
        return ThreadWorker(
            wid,
            made,
            gate=pool.gate,
            capacity=slots + ahead,
            ahead=ahead,
            label=pool.label,
            response_timeout=config.response_timeout_s,
            stream_buffer=config.stream_buffer,
            on_stuck=pool._replace_stuck,
            on_device_error=pool.device_error,
            stats=pool.stats,
            devices=group,
            device=pool.devices.name(group),
        )

    pool = WorkerPool.for_config(config, WorkerKind.THREAD, instance, new_worker, stats, assigner)
    return pool
