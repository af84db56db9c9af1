"""One worker's lane in the sequence scheduler: the sequences pinned to the worker, and how
their requests run there."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator, Callable
from typing import TYPE_CHECKING, Any

from ...errors import Unavailable
from ...types import Context, current_context
from .._collector import BatchCollector
from .._stats import VersionStats, postprocess, preprocess

if TYPE_CHECKING:
    from .._gate import WorkerGate
    from ._seq import Sequence
    from ._steps import Steps

__all__ = ["Lane"]

_now = time.perf_counter_ns


class Lane:
    """What the scheduler keeps for one worker (as every lane in the runtime is: the requests
    pinned to one worker, and what feeds it): the sequences pinned to it, and its batch collector
    (used when batching; its task starts with its first request).

    A request holding its sequence's turn runs here with ``types.current_context`` set to its
    Context: preprocess, then a slot on the worker (at once if free, else in the gate's line for
    this worker) or a place in the worker's next batch, then postprocess. A batched request
    whose wait is cancelled (its client left) tells the collector (``BatchCollector.left``),
    which watches no request's future itself: a running batch whose clients have all left is
    cancelled. For a ``continuous``
    instance, ``steps`` (set by the scheduler) is the worker's continuous batch, and streaming
    requests join it instead (``_steps``). Once the worker is lost (``lost`` says why) nothing
    new runs here: requests get ``closed_error(sid, why)``. The wait for a slot (not for the
    sequence's turn), preprocess and postprocess are counted in ``stats``.
    """

    __slots__ = (
        "worker",
        "sequences",
        "batches",
        "lost",
        "steps",
        "_gate",
        "_closed_error",
        "_stats",
    )

    def __init__(
        self,
        worker: Any,
        gate: WorkerGate,
        batches: BatchCollector[Any],
        closed_error: Callable[[str, str], BaseException],
        stats: VersionStats | None = None,
    ) -> None:
        self.worker = worker
        self.sequences: set[Sequence] = set()
        self.batches = batches
        self.lost: str | None = None  # why its sequences are gone, once the worker is
        self.steps: Steps | None = None  # the worker's continuous batch (a continuous instance)
        self._gate = gate
        self._closed_error = closed_error
        self._stats = stats if stats is not None else VersionStats()

    @property
    def queued(self) -> int:
        """Requests waiting for one of the worker's slots or for a batch."""
        steps = self.steps.waiting if self.steps is not None else 0
        return self._gate.waiting_on(self.worker) + self.batches.queued + steps

    async def infer(
        self, seq: Sequence, ctx: Context, inputs: Any, request: Any, *, batched: bool
    ) -> Any:
        """One request, on a slot of its own, or (``batched``) in the worker's next batch
        (``seq.batched`` holds it meanwhile)."""
        worker = self.worker
        inst = worker.instance
        caps = inst.capabilities
        token = current_context.set(ctx)
        try:
            if caps.has_preprocess:
                inputs = await preprocess(self._stats, inst, inputs, request)
            if batched:
                if self.lost is not None:
                    raise self._closed_error(seq.id, self.lost)
                batches = self.batches
                pending = seq.batched = batches.add(inputs, request, ctx)
                try:
                    outputs = await pending.future
                except BaseException:
                    if pending.future.cancelled():  # its client left: its batch may be abandoned
                        batches.left(pending)
                    del pending  # (what it raised holds this frame: no cycle through it)
                    raise
            else:
                await self._acquire_slot(seq.id)
                outputs = await worker.infer(inputs, request)  # gives the slot back
            if caps.has_postprocess:
                outputs = await postprocess(self._stats, inst, outputs, request)
            return outputs
        finally:
            current_context.reset(token)

    async def stream(
        self, seq: Sequence, ctx: Context, inputs: Any, request: Any
    ) -> AsyncGenerator[Any, None]:
        """The items of one request of a streaming model, on a slot held until they end (for a
        continuous instance: the items the worker's steps emit for it)."""
        worker = self.worker
        inst = worker.instance
        if self.steps is not None:
            async with contextlib.aclosing(self._step(seq, ctx, inputs, request)) as items:
                async for item in items:
                    yield item
            return
        # Set only until the first item: the producer task the worker starts copies it, and the
        # consumer's own context must not keep it between items.
        token = current_context.set(ctx)
        try:
            if inst.capabilities.has_preprocess:
                inputs = await preprocess(self._stats, inst, inputs, request)
            await self._acquire_slot(seq.id)
            items = worker.stream(inputs, request)  # gives the slot back when it ends
            try:
                first = await anext(items)
            except StopAsyncIteration:
                return
        finally:
            current_context.reset(token)
        try:
            yield first
            async for item in items:
                yield item
        finally:
            await items.aclose()

    async def _step(
        self, seq: Sequence, ctx: Context, inputs: Any, request: Any
    ) -> AsyncGenerator[Any, None]:
        assert self.steps is not None
        inst = self.worker.instance
        if inst.capabilities.has_preprocess:
            token = current_context.set(ctx)
            try:
                inputs = await preprocess(self._stats, inst, inputs, request)
            finally:
                current_context.reset(token)
        # (a lost worker's Steps refuses it with closed_error, as lose() told it)
        async with contextlib.aclosing(self.steps.stream(ctx, inputs, request)) as items:
            async for item in items:
                yield item

    async def _acquire_slot(self, sid: str) -> None:
        lost = self.lost
        if lost is None:
            if self._gate.try_acquire_on(self.worker):
                self._stats.unqueued += 1
                return
            try:
                start = _now()
                await self._gate.acquire_on(self.worker)
                self._stats.queue.add(_now() - start)
                return
            except Unavailable:  # the gate let the worker go while this waited
                lost = self.lost
                if lost is None:
                    raise
        raise self._closed_error(sid, lost)

    def lose(self, reason: str) -> None:
        """The worker left for good: nothing new runs here, and the requests queued for a batch
        fail with ``closed_error`` (those waiting for a slot were failed by the gate as it let
        the worker go, and learn why from ``lost``)."""
        self.lost = reason
        if self.steps is not None:
            self.steps.lose(lambda ctx: self._closed_error(ctx.sequence_id, reason))
        self.batches.stop()
        self.batches.fail_queued(lambda p: self._closed_error(p.tag.sequence_id, reason))

    def fail_waiting(self, error: Callable[[], BaseException]) -> None:
        """Every request waiting here, for a slot or for a batch, gets ``error()``."""
        self._gate.fail_pinned(self.worker, error)
        self.batches.fail_queued(lambda _: error())
