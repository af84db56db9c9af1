"""What a model version ran on each GPU: executions of ``predict``, the requests they ran and
their time (the statistics extension's ``device_stats``: docs/devices.md, "Seeing it").

A worker on a GPU adds to its device's :class:`DeviceCounts` as it adds to the version's
totals: a thread worker for each execution it runs, a worker process's parent for each report
of the process's counters (:meth:`DeviceCounts.merge`). Workers on the CPU add nothing here.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DeviceCounts"]


class DeviceCounts:
    """On one device: ``executions`` of ``predict``, the ``inferences`` (requests) they ran, and
    their time in nanoseconds (``ns``, each execution once)."""

    __slots__ = ("executions", "inferences", "ns")

    def __init__(self) -> None:
        self.executions = 0
        self.inferences = 0
        self.ns = 0

    def add(self, size: int, ns: int) -> None:
        """One execution over ``size`` requests that took ``ns``."""
        self.executions += 1
        self.inferences += size
        self.ns += ns

    def merge(self, delta: Any) -> None:
        """A worker process's report (a :class:`~podium.runtime._stats.ComputeDelta`): its
        executions are ``predict``'s, those over several requests by size in ``batched``."""
        executions = delta.predict.count
        batched = sum(count for count, _ in delta.batched.values())
        self.executions += executions
        self.inferences += executions - batched
        self.inferences += sum(size * count for size, (count, _) in delta.batched.items())
        self.ns += delta.predict.ns
