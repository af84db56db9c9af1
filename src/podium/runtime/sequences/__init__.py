"""Stateful sequences (TorchServe's sequence batching): a sequence's requests run in order on
the worker that holds its state.

Layout: ``_scheduler`` (:class:`SequenceScheduler`: opening, pinning, turns, ends, timeouts,
lost workers: the bookkeeping) on top of ``_seq`` (one sequence and its turn, the memory of
closed ids) and ``_lane`` (one worker's sequences, and how their requests run there; for a
``continuous`` instance, through ``_steps``, the worker's continuous batch). The
waiting lines, slots and batches are the runtime's own pieces (``runtime/_line``, ``_gate``,
``_collector``). Design notes: docs/sequences.md.
"""

from ._scheduler import SequenceScheduler

__all__ = ["SequenceScheduler"]
