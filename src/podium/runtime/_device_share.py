"""``predict_concurrency`` per device: the bound the workers of one model version that share a
GPU group hold together (docs/devices.md, "One device, one bound").

The :class:`~podium.runtime._gate.WorkerGate` asks :meth:`DeviceShares.room` before it gives a
worker a request. While two or more of the gate's workers are on one group, the requests the
workers on it hold together stay within ``limit``, so predicts (and batches: a batch takes one
slot) on that group do too, whatever each worker's own slots and queue-ahead places. A group
with one worker is bounded by that worker alone (its queue-ahead kept); the CPU (no GPU) is
never shared, so process workers of a CPU-bound model scale as before.

Nothing is counted here: what a group holds is the ``busy`` of the workers on it (``holders``:
every worker of the pool, a leaving one included until it is gone, since its calls still run
on the GPU), and who takes work there is the gate's own list of workers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["DeviceShares"]


class DeviceShares:
    """The requests held per GPU group, bounded to ``limit`` where workers share a group.
    ``holders()``: every worker that may hold requests; a worker's group is its ``devices``
    (GPU numbers; empty: the CPU)."""

    def __init__(self, limit: int, holders: Callable[[], Iterable[Any]]) -> None:
        if limit < 1:
            raise ValueError(f"a device's limit is at least 1, got {limit}")
        self.limit = limit
        self._holders = holders

    def room(self, worker: Any, takers: Iterable[Any]) -> bool:
        """Whether ``worker``'s group may take one more request (``takers``: the workers that
        take work)."""
        group = worker.devices
        if not group or sum(1 for w in takers if w.devices == group) < 2:
            return True
        return self.held(group) < self.limit

    def held(self, group: tuple[int, ...]) -> int:
        """Requests the workers on ``group`` hold now."""
        return sum(w.busy for w in self._holders() if w.devices == group)

    def slots(self, workers: Iterable[Any]) -> int:
        """The requests ``workers`` may hold at once: their capacities, where two or more of
        them share a group no more than ``limit`` on it (``podium_predict_slots``)."""
        alone = 0
        shared: dict[tuple[int, ...], list[int]] = {}
        for worker in workers:
            if worker.devices:
                shared.setdefault(worker.devices, []).append(worker.capacity)
            else:
                alone += worker.capacity
        for capacities in shared.values():
            alone += min(sum(capacities), self.limit) if len(capacities) > 1 else capacities[0]
        return alone
