"""Stateful sequences (TorchServe's sequence batching): a sequence's requests run in order on
the worker that holds its state.

Layout: ``_scheduler`` (:class:`SequenceScheduler`: opening, pinning, turns, ends, timeouts) on
top of ``_seq`` (one sequence and its turn, one worker's lane, the memory of closed ids); the
waiting lines, slots and batches come from the runtime's own pieces (``_line``, ``_gate``,
``_collector``). Design notes: docs/sequences.md.
"""

from ._scheduler import SequenceScheduler

__all__ = ["SequenceScheduler"]
