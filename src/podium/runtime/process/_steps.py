"""Continuous batching across the process boundary: the server's lane steps a worker process.

The scheduler (``runtime/continuous.py``) keeps every request and its lane in the server; the
model's ``Generation`` objects, with their ``state``, live in the worker process. Each step the
server sends one :class:`Step`: the generations that joined (with their inputs, once), those that
left (finished or cancelled: their state goes), and who steps now; the worker answers
:class:`Stepped`: each one's emitted items (or its preprocess's failure) and who finished.

Both sides name a generation by a ``gid`` that the server's :class:`RemoteSteps` gives it when it
first steps; the worker's :class:`ChildSteps` holds the real ``Generation`` under that gid. A step
that raises ends the generations it held on both sides; a worker process that dies fails the step
in flight with ``WorkerDied`` (``_parent``), and its replacement starts with nothing held.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from typing import Any

from ...model import model_error
from ...types import Generation, ModelInstance
from .._stats import VersionStats, preprocess
from ._messages import Failed, Step, Stepped, Unvalidated

__all__ = ["ChildSteps", "RemoteSteps"]


class RemoteSteps:
    """The server's side, one per worker process: which of the lane's generations the worker
    holds (by gid) and the step in flight (at most one: a lane steps one batch at a time)."""

    def __init__(self) -> None:
        self._held: dict[Generation, int] = {}
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Stepped]] = {}

    def joining(self, batch: list[Generation]) -> list[Generation]:
        """The generations of ``batch`` the worker does not hold yet (they join at this step)."""
        return [gen for gen in batch if gen not in self._held]

    def begin(
        self, cid: int, batch: list[Generation], snapshots: list[Any]
    ) -> tuple[Step, asyncio.Future[Stepped]]:
        """The message for one step of ``batch`` and the future its answer sets; ``snapshots``:
        the joining ones' request snapshots, in order (or [])."""
        held = self._held
        left = [gid for gen, gid in held.items() if gen.finished or gen.cancelled]
        if left:
            self._held = held = {g: i for g, i in held.items() if not (g.finished or g.cancelled)}
        joined: list[int] = []
        inputs: list[Any] = []
        order: list[int] = []
        for gen in batch:
            gid = held.get(gen)
            if gid is None:
                gid = held[gen] = next(self._ids)
                joined.append(gid)
                inputs.append(gen.inputs)
            order.append(gid)
        future = asyncio.get_running_loop().create_future()
        self._pending[cid] = future
        return Step(cid, joined, inputs, left, order, snapshots), future

    def answered(self, reply: Stepped) -> None:
        future = self._pending.pop(reply.cid, None)
        if future is not None and not future.done():
            future.set_result(reply)

    def failed(self, cid: int, exc: BaseException) -> bool:
        """The step ``cid`` raised in the worker (False: ``cid`` is not a step)."""
        future = self._pending.pop(cid, None)
        if future is None:
            return False
        if not future.done():
            future.set_exception(exc)
        return True

    def died(self, exc: BaseException) -> None:
        """The worker process is gone: the step in flight fails, nothing is held any more."""
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(exc)
        self._held.clear()

    def apply(
        self, batch: list[Generation], reply: Stepped
    ) -> dict[Generation, BaseException] | None:
        """Hand each generation its items and finish flag; the ones whose preprocess failed,
        with their error (they are not held any more, nor are the finished ones)."""
        failures: dict[Generation, BaseException] | None = None
        for gen, items in zip(batch, reply.items, strict=True):
            if type(items) is list:
                for item in items:
                    gen.emit(item)
            else:
                failures = failures or {}
                failures[gen] = items.exception()
                self._held.pop(gen, None)
        done = set(reply.done)
        for gen in batch:
            if self._held.get(gen) in done:
                gen.finished = True
                del self._held[gen]
        return failures

    def forget(self, cid: int, batch: list[Generation]) -> None:
        """The step ``cid`` of ``batch`` failed or was given up: the worker dropped their state
        (or is gone), and its answer, if one comes, is ignored."""
        self._pending.pop(cid, None)
        for gen in batch:
            self._held.pop(gen, None)


class ChildSteps:
    """The worker process's side: the generations it holds, stepped on the server's orders."""

    def __init__(
        self,
        instance: ModelInstance,
        stats: VersionStats,
        name: str,
        rebuild: Callable[[Any, Callable[[], Awaitable[Any]]], Any] | None,
    ) -> None:
        self._instance = instance
        self._stats = stats
        self._name = name
        self._rebuild = rebuild
        self._gens: dict[int, Generation] = {}
        #: what a rebuilt request waits on to see its client leave (``is_disconnected()``)
        self._gone: dict[int, asyncio.Event] = {}

    def drop(self, gids: list[int]) -> None:
        """The server fails these generations (their step failed): their state goes."""
        for gid in gids:
            self._leave(gid)

    def _leave(self, gid: int) -> None:
        self._gens.pop(gid, None)
        gone = self._gone.pop(gid, None)
        if gone is not None:
            gone.set()

    async def _join(self, gid: int, inputs: Any, snapshot: Any, failed: dict[int, Failed]) -> None:
        """Validate and preprocess one joining request on its own (as the server does for a
        thread worker); a failure is that request's alone."""
        instance = self._instance
        request = None
        if snapshot is not None and self._rebuild is not None:
            gone = self._gone[gid] = asyncio.Event()
            request = self._rebuild(snapshot, gone.wait)
        try:
            if isinstance(inputs, Unvalidated):
                inputs = instance.validate(inputs.value)
            if instance.capabilities.has_preprocess:
                inputs = await preprocess(self._stats, instance, inputs, request)
        except Exception as exc:
            failed[gid] = Failed.of(model_error(self._name, "preprocess", exc))
            self._leave(gid)
            return
        self._gens[gid] = Generation(inputs, request)

    async def run(self, message: Step) -> Stepped:
        """One step: drop who left, admit who joined, step the batch, say what it emitted."""
        gens = self._gens
        for gid in message.left:
            self._leave(gid)
        failed: dict[int, Failed] = {}
        if message.joined:
            snapshots = message.requests or [None] * len(message.joined)
            joins = zip(message.joined, message.inputs, snapshots, strict=True)
            await asyncio.gather(*(self._join(gid, v, r, failed) for gid, v, r in joins))
        batch = [gens[gid] for gid in message.batch if gid in gens]
        if batch:
            try:
                await self._instance.step(batch)
            except BaseException:
                self.drop(message.batch)
                raise
        items: list[Any] = []
        done: list[int] = []
        for gid in message.batch:
            if gid in failed:
                items.append(failed[gid])
                continue
            gen = gens[gid]
            gen.first = False
            items.append(gen.take())
            if gen.finished:
                done.append(gid)
                self._leave(gid)
        return Stepped(message.cid, items, done)
