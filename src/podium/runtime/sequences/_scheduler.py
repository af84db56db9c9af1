"""The sequence scheduler: opening, pinning, turns, ends and timeouts of stateful sequences.

A sequence is pinned to one worker when it starts (the ready worker holding the fewest open
sequences). Its requests take turns (:class:`~._seq.Sequence`): one at a time, in arrival order,
each running preprocess → predict → postprocess on that worker's instance (its
:class:`~._lane.Lane`) with ``types.current_context`` set to the request's
:class:`~podium.types.Context` (the sequence's state dict lives here, in the scheduler). A request
waits for a slot on its worker in the gate's line for that worker; with ``batch_size`` > 1 it
joins its worker's batch collector instead, so a batch holds at most one request per sequence (a
sequence only ever has one request past its turn). Ids of closed sequences are remembered (an LRU) so that a late request is told why its
sequence is over instead of silently starting a fresh one. Design notes: docs/sequences.md.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import uuid
from collections.abc import AsyncGenerator, Awaitable
from typing import Any

from ...config import ModelConfig
from ...errors import InvalidInput, SequenceClosed, SequenceLimit, Unavailable
from ...types import Context, SequenceRef, current_context
from .._clock import SYSTEM_CLOCK, Clock, Timer
from .._collector import BatchCollector, Pending
from .._scheduler import PoolScheduler, TaskSet
from .._stats import SequenceEnd
from ..workers import Worker, WorkerPool, WorkerState
from ._lane import Lane
from ._seq import ClosedIds, Sequence
from ._steps import Steps

__all__ = ["CLOSED_IDS", "SWEEP_MAX", "SequenceScheduler"]

logger = logging.getLogger("podium.sequences")

#: How many closed sequence ids are remembered (with why they closed).
CLOSED_IDS = 10_000
#: The longest pause between two sweeps for idle and expired sequences, in seconds.
SWEEP_MAX = 1.0

_READY = WorkerState.READY  # compared for every worker, for every new sequence


class SequenceScheduler(PoolScheduler):
    """Runs the requests of stateful sequences over a version's thread workers.

    ``infer_in`` / ``stream_in`` run one request in the sequence its :class:`SequenceRef` names
    (a new one when ``id`` is None: the id made is written back, with ``created``); ``ended`` is
    set on the request after which the sequence is over. ``infer`` / ``stream`` start a new
    sequence each. Refusals are immediate: ``SequenceLimit`` for a full per-sequence queue or
    too many open sequences, ``SequenceClosed`` (with the reason) for a closed id. ``clock``
    times the idle and absolute timeouts and the batch delay (tests pass a manual one).
    """

    def __init__(
        self, pool: WorkerPool, *, config: ModelConfig, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        super().__init__(pool)
        self._model = config.name
        self._batch_size = config.batch_size
        self._delay = config.max_batch_delay_ms / 1000.0
        self._idle_ms = config.sequence_max_idle_ms
        self._age_ms = config.sequence_timeout_ms
        self._max_waiting = config.max_sequence_queue_size
        self._max_sequences = config.max_num_sequences
        # continuous_batching on a sequence model: the next request of a sequence starts once
        # the previous one has produced its first item, not when its stream ends
        self._overlap = config.continuous_batching
        # and for a continuous instance (a TorchServe handler stepped with stopping_criteria),
        # each worker steps its requests in one batch: at most twice batch_size, as TorchServe
        self._step_limit = 2 * config.batch_size
        self._stream_buffer = config.stream_buffer
        self._seqs: dict[str, Sequence] = {}
        self._lanes: dict[Any, Lane] = {}
        self._ended = ClosedIds(CLOSED_IDS)
        self._tasks = TaskSet()  # the batch collectors and their running batches
        self._clock = clock
        self._now = clock.now
        limits = [ms / 1000.0 for ms in (self._idle_ms, self._age_ms) if ms]
        self._tick = max(min([SWEEP_MAX, *(t / 4 for t in limits)]), 0.001)
        self._sweeper: Timer | None = None
        self._closed = False
        self.batches_run = 0
        pool.on_worker_lost = self._on_worker_lost

    # -- the Scheduler protocol ----------------------------------------------------------------

    async def close(self) -> None:
        """Stop: every request waiting or in a running batch fails with ``Unavailable``, the sweep
        stops, the workers stop."""
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        await self._tasks.cancel()
        for seq in list(self._seqs.values()):
            seq.fail_waiting(self._stopped_error)
        for lane in list(self._lanes.values()):
            lane.fail_waiting(self._stopped_error)
        await self._pool.close()

    def statistics(self) -> dict[str, int]:
        """The pool's counters, ``sequences`` (open), ``queued`` (requests waiting for their
        sequence's turn, a slot or a batch) and ``batches`` when batching."""
        stats = self._pool.statistics()
        stats["sequences"] = len(self._seqs)
        stats["queued"] = sum(len(s.turns) for s in self._seqs.values()) + sum(
            lane.queued for lane in self._lanes.values()
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

    # -- requests in a sequence ------------------------------------------------------------------

    async def infer_in(self, sequence: SequenceRef, inputs: Any, request: Any) -> Any:
        """The postprocessed result of one request of ``sequence``, run after the sequence's
        earlier requests, on its worker."""
        self._activity.enter()
        try:
            seq, ctx, generation = await self._turn_of(sequence)
            try:
                batched = self._batch_size > 1
                return await seq.lane.infer(seq, ctx, inputs, request, batched=batched)
            finally:
                pending, seq.batched = seq.batched, None
                if (
                    pending is not None
                    and pending.task is not None
                    and not pending.task.done()
                    and pending.future.cancelled()
                ):
                    # left while its batch runs: the sequence's next request waits for the batch
                    pending.task.add_done_callback(
                        lambda _: self._finish(seq, sequence, ctx, generation)
                    )
                else:
                    self._finish(seq, sequence, ctx, generation)
        finally:
            self._activity.leave()

    async def stream_in(
        self, sequence: SequenceRef, inputs: Any, request: Any
    ) -> AsyncGenerator[Any, None]:
        """The items of one request of ``sequence`` (a non-streaming model yields one); the
        sequence's next request runs once this stream has ended, or, with continuous batching,
        once this request has produced its first item (so that a later request of the sequence
        can, for example, stop a stream that is still running)."""
        if not self._pool.instance.capabilities.streaming:
            yield await self.infer_in(sequence, inputs, request)
            return
        self._activity.enter()
        try:
            seq, ctx, generation = await self._turn_of(sequence)
            passed = False
            seq.running += 1
            try:
                async with contextlib.aclosing(seq.lane.stream(seq, ctx, inputs, request)) as items:
                    async for item in items:
                        if self._overlap and not passed:
                            passed = True
                            self._pass_turn(seq)  # it has started: the next one may start too
                        yield item
            finally:
                seq.running -= 1
                self._finish(seq, sequence, ctx, generation, passed=passed)
        finally:
            self._activity.leave()

    # -- opening, turns, closing -----------------------------------------------------------------

    async def _turn_of(self, sequence: SequenceRef) -> tuple[Sequence, Context, int]:
        """The sequence a request names, once it is this request's turn in it: the sequence,
        the request's Context and the sequence's generation (what :meth:`_finish` checks)."""
        seq = await self._open(sequence)
        await self._take_turn(seq, sequence)
        self._begin(seq, sequence)
        return seq, seq.context(last=sequence.end), seq.generation

    async def _open(self, ref: SequenceRef) -> Sequence:
        """The sequence ``ref`` names: the one open under its id (a start flag begins a new one
        there when its turn comes), or a new one; refused by the route's rule when the id has
        no open sequence (``SequenceRef.needs_start``)."""
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
        reason: str | None
        if seq is not None:
            expired = self._expiry(seq, self._now())
            if expired is None:
                return seq
            reason, why = expired
            self._close(seq, reason, why)  # expired, the sweep has not come by yet
        else:
            reason = self._ended.get(sid)
        if ref.start:
            return await self._start(sid)
        if ref.needs_start:
            raise self._start_needed(sid, reason)
        if reason is None:
            return await self._start(sid)  # a client-chosen id starts a sequence
        raise self._closed_error(sid, reason)

    async def _start(self, sid: str) -> Sequence:
        self._check_room()
        worker = self._pick_worker()
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
            worker = self._pick_worker()
            if worker is None:
                raise Unavailable(f"{self._label} has no ready worker for a new sequence")
        lane = self._lanes.get(worker)
        if lane is None:
            lane = Lane(
                worker, self._gate, self._make_collector(worker), self._closed_error, self._stats
            )
            if worker.instance.capabilities.continuous:
                lane.steps = Steps(
                    worker,
                    self._gate,
                    limit=self._step_limit,
                    buffer=self._stream_buffer,
                    tasks=self._tasks,
                    stopped=self._stopped_error,
                    stats=self._stats,
                )
            self._lanes[worker] = lane
        seq = Sequence(sid, lane, self._now(), self._max_waiting, self._pass_turn)
        lane.sequences.add(seq)
        self._seqs[sid] = seq
        self._schedule_sweep()
        return seq

    def _check_room(self) -> None:
        limit = self._max_sequences
        if limit and len(self._seqs) >= limit:
            raise SequenceLimit(
                f"{self._label} has {len(self._seqs)} open sequences (max_num_sequences "
                f"{limit}); end one or wait for one to expire"
            )

    def _pick_worker(self) -> Worker | None:
        """The ready worker holding the fewest open sequences (the oldest among equals)."""
        best: Worker | None = None
        fewest = 0
        for worker in self._gate.workers:
            if worker.state is not _READY:
                continue
            lane = self._lanes.get(worker)
            held = len(lane.sequences) if lane is not None else 0
            if best is None or held < fewest:
                best, fewest = worker, held
        return best

    async def _take_turn(self, seq: Sequence, ref: SequenceRef) -> None:
        """Wait for the sequence's earlier requests. If too many wait: ``SequenceLimit``, or,
        for a request with ``ref.joined``, wait for room (resolving ``joined`` once it has its
        place)."""
        if seq.try_take_turn():
            _joined(ref)
            return
        while seq.turns.full():
            if ref.joined is None:
                raise SequenceLimit(
                    f"{self._label}: sequence '{seq.id}' already has {seq.turns.waiting} "
                    f"requests waiting behind the one running (max_sequence_queue_size "
                    f"{self._max_waiting})"
                )
            await seq.wait_for_room()  # woken when the turn passes; closing fails it
            if seq.try_take_turn():
                _joined(ref)
                return
        _joined(ref)  # before wait() appends it to the line, with no await between
        await seq.turns.wait()  # the turn is handed over with busy still set

    def _begin(self, seq: Sequence, ref: SequenceRef) -> None:
        """The request now holding the turn: a start flag begins a new sequence under the id
        (ending one still open, as Triton does); a request after the sequence ended is refused
        (and passes the turn on)."""
        if ref.start:
            if not seq.first or seq.ended is not None:
                if seq.ended is None:
                    self._stats.sequence_ended(SequenceEnd.RESTARTED)
                    logger.warning(
                        "%s: sequence '%s' had not ended when a request started a new one with "
                        "its id; the previous sequence ends early",
                        self._label,
                        seq.id,
                    )
                seq.restart(self._now())
            return
        reason = seq.ended
        if reason is not None:
            self._pass_turn(seq)
            if ref.needs_start:
                raise self._start_needed(seq.id, reason)
            raise self._closed_error(seq.id, reason)

    def _pass_turn(self, seq: Sequence) -> None:
        seq.last = self._now()
        seq.pass_turn()
        self._settle(seq)

    def _settle(self, seq: Sequence) -> None:
        """Close a sequence that ended once nothing of its id is left in flight."""
        if seq.ended is not None and seq.closed is None and seq.quiet:
            self._close(seq, seq.ended)

    def _finish(
        self,
        seq: Sequence,
        ref: SequenceRef,
        ctx: Context,
        generation: int,
        *,
        passed: bool = False,
    ) -> None:
        """The request holding the turn is done: end the sequence if it asked to, then pass on
        (``passed``: it gave the turn away already, when it started streaming)."""
        ref.headers.update(ctx.headers)
        if seq.closed is not None:  # closed while it ran (timeout, worker lost)
            ref.ended = True
            return
        if generation != seq.generation or seq.ended is not None:
            ref.ended = True  # a later request began a new sequence, or this one ended already
        elif ref.end:
            ref.ended = True
            seq.end("ended by a request")
            self._stats.sequence_ended(SequenceEnd.REQUEST)
        elif ctx.ended:
            ref.ended = True
            seq.end("ended by the model")
            self._stats.sequence_ended(SequenceEnd.MODEL)
        if not passed:
            self._pass_turn(seq)
        else:
            seq.last = self._now()  # the idle clock starts again
            self._settle(seq)

    def _expiry(self, seq: Sequence, now: float) -> tuple[str, SequenceEnd | None] | None:
        """Why ``seq`` is expired at ``now`` (and how it ended, unless it had already), or None
        while it is not."""
        quiet = seq.quiet
        if quiet and seq.ended is not None:
            return seq.ended, None  # ended, and the last of its requests has left
        if self._age_ms and now - seq.created >= self._age_ms / 1000.0:
            return f"older than sequence_timeout_ms ({self._age_ms:g} ms)", SequenceEnd.TIMEOUT
        if quiet and self._idle_ms and now - seq.last >= self._idle_ms / 1000.0:
            return (
                f"idle for more than sequence_max_idle_ms ({self._idle_ms:g} ms)",
                SequenceEnd.IDLE,
            )
        return None

    def _close(self, seq: Sequence, reason: str, why: SequenceEnd | None = None) -> None:
        """End ``seq``: its id is remembered with ``reason``, its state dropped, and the requests
        waiting for its turn get ``SequenceClosed``. A request already running finishes.
        ``why`` is counted (sequences ended, by reason) unless the sequence had ended already
        (counted then)."""
        if seq.closed is not None:
            return
        if why is not None and seq.ended is None:
            self._stats.sequence_ended(why)
        seq.closed = reason
        if self._seqs.get(seq.id) is seq:
            del self._seqs[seq.id]
        seq.lane.sequences.discard(seq)
        self._ended.add(seq.id, reason)
        seq.state = {}
        seq.fail_waiting(lambda: self._closed_error(seq.id, reason))

    def _closed_error(self, sid: str, reason: str) -> SequenceClosed:
        return SequenceClosed(
            f"{self._label}: sequence '{sid}' is closed: {reason}; a request without the "
            f"start flag does not begin it again (send the start flag to begin a new sequence "
            f"with this id, or send no id to get a new one)"
        )

    def _start_needed(self, sid: str, reason: str | None) -> InvalidInput:
        """Triton's refusal of a request without the start flag for an id with no open
        sequence (and why there is none, when Podium remembers)."""
        why = "no sequence with this id is open" if reason is None else f"it is closed: {reason}"
        return InvalidInput(
            f"inference request for sequence '{sid}' to {self._label} must specify the START "
            f"flag on the first request of the sequence ({why})"
        )

    def _stopped_error(self) -> Unavailable:
        return Unavailable(f"{self._label} stopped before this request ran")

    def _schedule_sweep(self) -> None:
        if self._sweeper is None and (self._idle_ms or self._age_ms) and self._seqs:
            self._sweeper = self._clock.call_later(self._tick, self._sweep)

    def _sweep(self) -> None:
        """Close idle and expired sequences: one periodic timer, no timer per request."""
        self._sweeper = None
        if self._closed:
            return
        now = self._now()
        for seq in list(self._seqs.values()):
            expired = self._expiry(seq, now)
            if expired is not None:
                self._close(seq, *expired)
        self._schedule_sweep()

    def _on_worker_lost(self, worker: Worker, how: str) -> None:
        """The worker left for good: its sequences' state is gone with it. They close; requests
        waiting on them (for the turn, a slot, a batch) get ``SequenceClosed``; other workers'
        sequences carry on."""
        lane = self._lanes.pop(worker, None)
        if lane is None:
            return
        reason = f"its state was lost when worker {worker.id} {how}"
        lane.lose(reason)
        for seq in list(lane.sequences):
            self._close(seq, reason, SequenceEnd.WORKER_LOST)

    # -- batches on the pinned worker --------------------------------------------------------------

    def _make_collector(self, worker: Worker) -> BatchCollector[Worker]:
        """The batches of one worker: up to ``batch_size`` requests (one per sequence, as each
        sequence has one request past its turn), closed when full or ``max_batch_delay`` after
        the oldest arrived, each on a slot of that worker. Its task starts with its first
        request."""
        return BatchCollector(
            model=self._model,
            label=self._label,
            size=self._batch_size,
            delay=self._delay,
            limit=None,  # bounded by the sequences: one request each
            acquire=functools.partial(self._gate.acquire_on, worker),
            release=self._gate.release,
            run=self._run_batch,
            tasks=self._tasks,
            stopped=self._stopped_error,
            clock=self._clock,
            stats=self._stats,
        )

    def _run_batch(self, worker: Worker, batch: list[Pending]) -> Awaitable[Any]:
        """One batch on ``worker``, in the batch's own task: the model sees the list of the
        requests' Contexts, in the batch's order."""
        self.batches_run += 1
        current_context.set([p.tag for p in batch])  # this task's own context
        return worker.batch([p.inputs for p in batch], [p.request for p in batch])


def _joined(ref: SequenceRef) -> None:
    joined = ref.joined
    if joined is not None and not joined.done():
        joined.set_result(None)
