"""Stateful sequences (TorchServe's sequence batching): a sequence's requests run in order on the
worker that holds its state.

A sequence is pinned to one worker when it starts (the ready worker holding the fewest open
sequences). Its requests take turns: one at a time, in arrival order, each running
preprocess → predict → postprocess on that worker's instance with ``types.current_context`` set
to the request's :class:`~podium.types.Context` (the sequence's state dict lives here, in the
scheduler). With ``batch_size`` > 1 each worker forms batches of at most one request per
sequence (a sequence only ever has one request past its turn). Ids of closed sequences are
remembered (an LRU) so that a late request is told why its sequence is over instead of silently
starting a fresh one. Design notes: docs/sequences.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable
from typing import Any

from ..config import ModelConfig
from ..errors import BadModelOutput, SequenceClosed, SequenceLimit, Unavailable
from ..types import Context, SequenceRef, current_context
from ._scheduler import Activity
from ._seq import ClosedIds, Entry, Lane, Sequence
from .direct import stream_inputs_through
from .workers import Worker, WorkerPool

__all__ = ["SequenceScheduler"]

#: How many closed sequence ids are remembered (with why they closed).
CLOSED_IDS = 10_000
#: The longest pause between two sweeps for idle and expired sequences, in seconds.
SWEEP_MAX = 1.0


class SequenceScheduler:
    """Runs the requests of stateful sequences over a version's thread workers.

    ``infer_in`` / ``stream_in`` run one request in the sequence its :class:`SequenceRef` names
    (a new one when ``id`` is None: the id made is written back, with ``created``); ``ended`` is
    set on the request after which the sequence is over. ``infer`` / ``stream`` start a new
    sequence each. Refusals are immediate: ``SequenceLimit`` for a full per-sequence queue or
    too many open sequences, ``SequenceClosed`` (with the reason) for a closed id.
    """

    def __init__(self, pool: WorkerPool, *, config: ModelConfig) -> None:
        self._pool = pool
        self._gate = pool.gate
        self._label = pool.label
        self._batch_size = config.batch_size
        self._delay = config.max_batch_delay_ms / 1000.0
        self._idle_ms = config.sequence_max_idle_ms
        self._age_ms = config.sequence_timeout_ms
        self._max_waiting = config.max_sequence_queue_size
        self._max_sequences = config.max_num_sequences
        # continuous_batching on a sequence model: the next request of a sequence starts once
        # the previous one has produced its first item, not when its stream ends
        self._overlap = config.continuous_batching
        self._seqs: dict[str, Sequence] = {}
        self._lanes: dict[Any, Lane] = {}
        self._ended = ClosedIds(CLOSED_IDS)
        self._tasks: set[asyncio.Task[Any]] = set()
        limits = [ms / 1000.0 for ms in (self._idle_ms, self._age_ms) if ms]
        self._tick = max(min([SWEEP_MAX, *(t / 4 for t in limits)]), 0.001)
        self._sweeper: asyncio.TimerHandle | None = None
        self._closed = False
        self._activity = Activity()
        self.batches_run = 0
        pool.on_worker_lost = self._worker_lost
        self._gate.on_release = self._released

    @property
    def pool(self) -> WorkerPool:
        return self._pool

    # -- the Scheduler protocol ----------------------------------------------------------------

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        """Stop: every request waiting or in a running batch fails with ``Unavailable``, the sweep
        stops, the workers stop."""
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for seq in list(self._seqs.values()):
            while seq.waiters:
                self._fail(seq.waiters.popleft(), self._stopped())
        for lane in list(self._lanes.values()):
            while lane.slot_waiters:
                self._fail(lane.slot_waiters.popleft()[0], self._stopped())
            while lane.queue:
                self._fail(lane.queue.popleft().future, self._stopped())
        await self._pool.close()

    async def drain(self) -> None:
        """Return once no request is in this scheduler (new ones may still arrive)."""
        await self._activity.drain()

    def statistics(self) -> dict[str, int]:
        """The pool's counters, ``sequences`` (open), ``queued`` (requests waiting for their
        sequence's turn, a slot or a batch) and ``batches`` when batching."""
        stats = self._pool.statistics()
        stats["sequences"] = len(self._seqs)
        stats["queued"] = sum(len(s.waiters) for s in self._seqs.values()) + sum(
            len(lane.slot_waiters) + len(lane.queue) for lane in self._lanes.values()
        )
        if self._batch_size > 1:
            stats["batches"] = self.batches_run
        return stats

    async def infer(self, inputs: Any, request: Any) -> Any:
        """One request in a new sequence."""
        return await self.infer_in(SequenceRef(), inputs, request)

    def stream(self, inputs: Any, request: Any) -> AsyncGenerator[Any, None]:
        """One streaming request in a new sequence."""
        return self.stream_in(SequenceRef(), inputs, request)

    async def stream_inputs(
        self, inputs: AsyncIterator[Any], request: Any
    ) -> AsyncGenerator[Any, None]:
        """A model that reads a stream of requests reads it outside any sequence."""
        self._activity.enter()
        try:
            async with contextlib.aclosing(
                stream_inputs_through(self._pool, inputs, request)
            ) as items:
                async for item in items:
                    yield item
        finally:
            self._activity.leave()

    # -- requests in a sequence ------------------------------------------------------------------

    async def infer_in(self, sequence: SequenceRef, inputs: Any, request: Any) -> Any:
        """The postprocessed result of one request of ``sequence``, run after the sequence's
        earlier requests, on its worker."""
        self._activity.enter()
        try:
            seq = await self._open(sequence)
            await self._turn(seq)
            ctx = seq.context(last=sequence.end)
            taken: list[Entry] = []
            try:
                if self._batch_size > 1:
                    return await self._batched(seq, ctx, inputs, request, taken)
                return await self._direct(seq, ctx, inputs, request)
            finally:
                task = taken[0].task if taken else None
                if task is not None and not task.done() and taken[0].future.cancelled():
                    # left while its batch runs: the sequence's next request waits for the batch
                    task.add_done_callback(lambda _: self._finish(seq, sequence, ctx))
                else:
                    self._finish(seq, sequence, ctx)
        finally:
            self._activity.leave()

    async def stream_in(
        self, sequence: SequenceRef, inputs: Any, request: Any
    ) -> AsyncGenerator[Any, None]:
        """The items of one request of ``sequence`` (a non-streaming model yields one); the
        sequence's next request runs once this stream has ended, or, with continuous batching,
        once this request has produced its first item (so that a later request of the sequence
        can, for example, stop a stream that is still running)."""
        if not self._pool.instance.streaming:
            yield await self.infer_in(sequence, inputs, request)
            return
        self._activity.enter()
        try:
            seq = await self._open(sequence)
            await self._turn(seq)
            ctx = seq.context(last=sequence.end)
            passed = False
            seq.running += 1
            try:
                async with contextlib.aclosing(self._items(seq, ctx, inputs, request)) as items:
                    async for item in items:
                        if self._overlap and not passed:
                            passed = True
                            self._pass_turn(seq)  # it has started: the next one may start too
                        yield item
            finally:
                seq.running -= 1
                self._finish(seq, sequence, ctx, passed=passed)
        finally:
            self._activity.leave()

    # -- opening, turns, closing -----------------------------------------------------------------

    async def _open(self, ref: SequenceRef) -> Sequence:
        """The open sequence ``ref`` names, or a new one; ``SequenceClosed`` for a closed id."""
        if self._closed:
            raise Unavailable(f"{self._label} is stopped")
        if ref.id is None:
            sid = uuid.uuid4().hex
            made = await self._start(sid)
            ref.id = sid
            ref.created = True
            return made
        sid = ref.id
        seq = self._seqs.get(sid)
        if seq is not None:
            reason = self._expired(seq, asyncio.get_running_loop().time())
            if reason is None:
                return seq
            self._close(seq, reason)  # expired, the sweep has not come by yet
        else:
            reason = self._ended.get(sid)
            if reason is None:
                return await self._start(sid)  # a client-chosen id starts a sequence
        raise self._closed_error(sid, reason)

    async def _start(self, sid: str) -> Sequence:
        self._check_room()
        worker = self._pick()
        if worker is None:
            # No ready worker (one is starting, or none will come): wait as any request does,
            # with the pool's own errors for "none will come".
            got = await self._gate.acquire()
            self._gate.release(got)
            existing = self._seqs.get(sid)  # started by a request that arrived meanwhile
            if existing is not None:
                return existing
            if self._closed:
                raise Unavailable(f"{self._label} is stopped")
            self._check_room()
            worker = self._pick()
            if worker is None:
                raise Unavailable(f"{self._label} has no ready worker for a new sequence")
        lane = self._lanes.get(worker)
        if lane is None:
            lane = self._lanes[worker] = Lane(worker)
        seq = Sequence(sid, lane, asyncio.get_running_loop().time())
        lane.sequences.add(seq)
        self._seqs[sid] = seq
        self._schedule_sweep()
        return seq

    def _check_room(self) -> None:
        limit = self._max_sequences or self._pool.max_workers * self._batch_size * 4
        if len(self._seqs) >= limit:
            raise SequenceLimit(
                f"{self._label} has {len(self._seqs)} open sequences (max_num_sequences "
                f"{limit}); end one or wait for one to expire"
            )

    def _pick(self) -> Worker | None:
        """The ready worker holding the fewest open sequences (the oldest among equals)."""
        best: Worker | None = None
        fewest = 0
        for worker in self._gate.workers:
            if worker.state != "ready":
                continue
            lane = self._lanes.get(worker)
            held = len(lane.sequences) if lane is not None else 0
            if best is None or held < fewest:
                best, fewest = worker, held
        return best

    async def _turn(self, seq: Sequence) -> None:
        """Wait for the sequence's earlier requests; ``SequenceLimit`` if too many wait."""
        if not seq.busy and not seq.waiters:
            seq.busy = True
            return
        if len(seq.waiters) >= self._max_waiting:
            raise SequenceLimit(
                f"{self._label}: sequence '{seq.id}' already has {len(seq.waiters)} requests "
                f"waiting behind the one running (max_sequence_queue_size {self._max_waiting})"
            )
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        seq.waiters.append(future)
        try:
            await future  # the turn is handed over with busy still set
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self._pass_turn(seq)  # handed the turn as we left: pass it on
            else:
                with contextlib.suppress(ValueError):
                    seq.waiters.remove(future)
            raise

    def _pass_turn(self, seq: Sequence) -> None:
        seq.last = asyncio.get_running_loop().time()
        while seq.waiters:
            future = seq.waiters.popleft()
            if not future.done():
                future.set_result(None)
                return
        seq.busy = False

    def _finish(
        self, seq: Sequence, ref: SequenceRef, ctx: Context, *, passed: bool = False
    ) -> None:
        """The request holding the turn is done: end the sequence if it asked to, else pass on
        (``passed``: it gave the turn away already, when it started streaming)."""
        ref.headers.update(ctx.headers)
        if seq.closed is not None:  # closed while it ran (timeout, worker lost)
            ref.ended = True
            return
        if ref.end:
            reason = "ended by a request"
        elif ctx.ended:
            reason = "ended by the model"
        else:
            if not passed:
                self._pass_turn(seq)
            else:
                seq.last = asyncio.get_running_loop().time()  # the idle clock starts again
            return
        ref.ended = True
        self._close(seq, reason)

    def _expired(self, seq: Sequence, now: float) -> str | None:
        if self._age_ms and now - seq.created >= self._age_ms / 1000.0:
            return f"older than sequence_timeout_ms ({self._age_ms:g} ms)"
        if (
            self._idle_ms
            and not seq.busy
            and not seq.running
            and not seq.waiters
            and now - seq.last >= self._idle_ms / 1000.0
        ):
            return f"idle for more than sequence_max_idle_ms ({self._idle_ms:g} ms)"
        return None

    def _close(self, seq: Sequence, reason: str) -> None:
        """End ``seq``: its id is remembered with ``reason``, its state dropped, and the requests
        waiting for its turn get ``SequenceClosed``. A request already running finishes."""
        if seq.closed is not None:
            return
        seq.closed = reason
        if self._seqs.get(seq.id) is seq:
            del self._seqs[seq.id]
        seq.lane.sequences.discard(seq)
        self._ended.add(seq.id, reason)
        seq.state = {}
        while seq.waiters:
            self._fail(seq.waiters.popleft(), self._closed_error(seq.id, reason))

    def _closed_error(self, sid: str, reason: str) -> SequenceClosed:
        return SequenceClosed(
            f"{self._label}: sequence '{sid}' is closed: {reason}; it is not started again "
            f"(send a request without a sequence id, or a new id, to start a new sequence)"
        )

    def _stopped(self) -> Unavailable:
        return Unavailable(f"{self._label} stopped before this request ran")

    @staticmethod
    def _fail(future: asyncio.Future[Any], exc: Exception) -> None:
        if not future.done():
            future.set_exception(exc)

    def _schedule_sweep(self) -> None:
        if self._sweeper is None and (self._idle_ms or self._age_ms) and self._seqs:
            self._sweeper = asyncio.get_running_loop().call_later(self._tick, self._sweep)

    def _sweep(self) -> None:
        """Close idle and expired sequences: one periodic timer, no timer per request."""
        self._sweeper = None
        if self._closed:
            return
        now = asyncio.get_running_loop().time()
        for seq in list(self._seqs.values()):
            reason = self._expired(seq, now)
            if reason is not None:
                self._close(seq, reason)
        self._schedule_sweep()

    def _worker_lost(self, worker: Worker, how: str) -> None:
        """The worker left for good: its sequences' state is gone with it. They close; requests
        waiting on them get ``SequenceClosed``; other workers' sequences carry on."""
        lane = self._lanes.pop(worker, None)
        if lane is None:
            return
        reason = f"its state was lost when worker {worker.id} {how}"
        lane.lost = reason
        for seq in list(lane.sequences):
            self._close(seq, reason)
        if lane.collector is not None:
            lane.collector.cancel()
        while lane.slot_waiters:
            future, waiting = lane.slot_waiters.popleft()
            self._fail(future, self._closed_error(waiting.id if waiting else "?", reason))
        while lane.queue:
            entry = lane.queue.popleft()
            self._fail(entry.future, self._closed_error(entry.seq.id, reason))

    # -- running on the pinned worker ------------------------------------------------------------

    async def _slot(self, lane: Lane, seq: Sequence | None) -> None:
        """A slot on the lane's worker: at once if free, else in that worker's own FIFO line."""
        if lane.lost is not None:
            raise self._closed_error(seq.id if seq else "?", lane.lost)
        if not lane.slot_waiters and self._gate.try_acquire_on(lane.worker):
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiter = (future, seq)
        lane.slot_waiters.append(waiter)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self._gate.release(lane.worker)  # handed a slot as we left: pass it on
            else:
                with contextlib.suppress(ValueError):
                    lane.slot_waiters.remove(waiter)
            raise

    def _released(self, worker: Any) -> None:
        """A slot on ``worker`` was freed: it goes to the oldest request waiting for it."""
        lane = self._lanes.get(worker)
        if lane is None:
            return
        while lane.slot_waiters:
            future = lane.slot_waiters[0][0]
            if future.done():
                lane.slot_waiters.popleft()
                continue
            if not self._gate.try_acquire_on(worker):
                return
            lane.slot_waiters.popleft()
            future.set_result(None)

    async def _direct(self, seq: Sequence, ctx: Context, inputs: Any, request: Any) -> Any:
        worker = seq.lane.worker
        inst = worker.instance
        token = current_context.set(ctx)
        try:
            if inst.has_preprocess:
                inputs = await inst.preprocess(inputs, request)
            await self._slot(seq.lane, seq)
            outputs = await worker.infer(inputs, request)  # gives the slot back
            if inst.has_postprocess:
                outputs = await inst.postprocess(outputs, request)
            return outputs
        finally:
            current_context.reset(token)

    async def _items(
        self, seq: Sequence, ctx: Context, inputs: Any, request: Any
    ) -> AsyncGenerator[Any, None]:
        worker = seq.lane.worker
        inst = worker.instance
        # Set only until the first item: the producer task the worker starts copies it, and the
        # consumer's own context must not keep it between items.
        token = current_context.set(ctx)
        try:
            if inst.has_preprocess:
                inputs = await inst.preprocess(inputs, request)
            await self._slot(seq.lane, seq)
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

    async def _batched(
        self, seq: Sequence, ctx: Context, inputs: Any, request: Any, taken: list[Entry]
    ) -> Any:
        lane = seq.lane
        inst = lane.worker.instance
        token = current_context.set(ctx)
        try:
            if inst.has_preprocess:
                inputs = await inst.preprocess(inputs, request)
            if lane.lost is not None:
                raise self._closed_error(seq.id, lane.lost)
            loop = asyncio.get_running_loop()
            future: asyncio.Future[Any] = loop.create_future()
            entry = Entry(seq, ctx, inputs, request, future, loop.time())
            taken.append(entry)
            lane.queue.append(entry)
            lane.arrived.set()
            if lane.collector is None:
                lane.collector = self._spawn(self._collect(lane))
            outputs = await future
            if inst.has_postprocess:
                outputs = await inst.postprocess(outputs, request)
            return outputs
        finally:
            current_context.reset(token)

    def _spawn(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    @staticmethod
    def _live(lane: Lane) -> int:
        while lane.queue and lane.queue[0].future.done():
            lane.queue.popleft()
        return sum(1 for e in lane.queue if not e.future.done())

    async def _collect(self, lane: Lane) -> None:
        """One worker's batches: up to ``batch_size`` requests (one per sequence, as each
        sequence has one request past its turn), closed when full or ``max_batch_delay`` after
        the oldest arrived."""
        loop = asyncio.get_running_loop()
        while True:
            while not self._live(lane):
                lane.arrived.clear()
                await lane.arrived.wait()
            deadline = lane.queue[0].arrived + self._delay
            while self._live(lane) < self._batch_size:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                lane.arrived.clear()
                try:
                    await asyncio.wait_for(lane.arrived.wait(), remaining)
                except TimeoutError:
                    break
            await self._slot(lane, None)
            batch: list[Entry] = []
            while lane.queue and len(batch) < self._batch_size:
                entry = lane.queue.popleft()
                if not entry.future.done():
                    batch.append(entry)
            if not batch:
                self._gate.release(lane.worker)
                continue
            task = self._spawn(self._run_batch(lane.worker, batch))
            for entry in batch:
                entry.task = task

            def unanswered(done: asyncio.Future[Any], batch: list[Entry] = batch) -> None:
                # cancelled by close(), even before it started: nobody must wait forever
                for e in batch:
                    self._fail(e.future, self._stopped())

            def abandon(
                _: asyncio.Future[Any], task: asyncio.Task[Any] = task, batch: list[Entry] = batch
            ) -> None:
                if all(e.future.cancelled() for e in batch):
                    task.cancel()

            task.add_done_callback(unanswered)
            for entry in batch:
                entry.future.add_done_callback(abandon)

    async def _run_batch(self, worker: Worker, batch: list[Entry]) -> None:
        self.batches_run += 1
        current_context.set([e.ctx for e in batch])  # this task's own context
        try:
            outputs = await worker.batch([e.inputs for e in batch], [e.request for e in batch])
            if not isinstance(outputs, list | tuple):
                raise BadModelOutput(
                    f"{self._label} predict must return a list for a batch of {len(batch)} "
                    f"requests, got {type(outputs).__name__}"
                )
            if len(outputs) != len(batch):
                raise BadModelOutput(
                    f"{self._label} predict returned {len(outputs)} results for a batch of "
                    f"{len(batch)} requests"
                )
        except Exception as exc:
            for e in batch:
                self._fail(e.future, exc)
            return
        for e, out in zip(batch, outputs, strict=True):
            if not e.future.done():
                e.future.set_result(out)
