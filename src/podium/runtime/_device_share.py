"""``predict_concurrency`` per device: the bound the workers of one model version that share a
GPU group hold together (docs/devices.md, "One device, one bound").

The :class:`~podium.runtime._gate.WorkerGate` asks :meth:`DeviceShares.room` before it gives a
worker a request and tells :meth:`take` and :meth:`give` as it does for the worker's own
``busy``. While two or more of the gate's workers are on one group, the requests they hold
together stay within ``limit``, so predicts (and batches: a batch takes one slot) on that group
do too, whatever each worker's own slots and queue-ahead places. A group with one worker is
bounded by that worker alone (its queue-ahead kept); the CPU (no GPU) is never shared, so
process workers of a CPU-bound model scale as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["DeviceShares"]

#: A worker's device group (GPU numbers; empty: the CPU), or None if it has none.
GroupOf = Callable[[Any], tuple[int, ...] | None]


class _Share:
    __slots__ = ("busy", "members")

    def __init__(self) -> None:
        self.busy = 0  # requests held by the workers on the group (leaving ones included)
        self.members: list[Any] = []  # the gate's workers on the group (taking work)


class DeviceShares:
    """The requests held per GPU group, bounded to ``limit`` where workers share a group."""

    def __init__(self, limit: int, group_of: GroupOf) -> None:
        if limit < 1:
            raise ValueError(f"a device's limit is at least 1, got {limit}")
        self.limit = limit
        self._group_of = group_of
        self._groups: dict[tuple[int, ...], _Share] = {}
        self._of: dict[Any, _Share] = {}  # worker → its group's share (while it holds any)

    def join(self, worker: Any) -> None:
        """``worker`` takes work: it counts on its group from now on (not on the CPU)."""
        share = self._of.get(worker)
        if share is None:
            group = self._group_of(worker)
            if not group:
                return
            share = self._groups.setdefault(group, _Share())
            self._of[worker] = share
        if worker not in share.members:
            share.members.append(worker)

    def leave(self, worker: Any) -> None:
        """``worker`` takes no new work; what it holds still counts until it gives it back."""
        share = self._of.get(worker)
        if share is not None and worker in share.members:
            share.members.remove(worker)
        if share is not None and worker.busy == 0:
            del self._of[worker]

    def room(self, worker: Any) -> bool:
        """Whether ``worker``'s group may take one more request."""
        share = self._of.get(worker)
        return share is None or len(share.members) < 2 or share.busy < self.limit

    def take(self, worker: Any) -> None:
        share = self._of.get(worker)
        if share is not None:
            share.busy += 1

    def give(self, worker: Any) -> Iterable[Any]:
        """``worker`` gave one request back: the other workers of its group (who may now have
        room; the gate wakes them)."""
        share = self._of.get(worker)
        if share is None:
            return ()
        share.busy -= 1
        if worker not in share.members and worker.busy == 0:
            del self._of[worker]
        return [w for w in share.members if w is not worker]

    def slots(self, workers: Iterable[Any]) -> int:
        """The requests ``workers`` may hold at once: their capacities, where two or more of
        them share a group no more than ``limit`` on it (``podium_predict_slots``)."""
        alone = 0
        shared: dict[int, list[int]] = {}
        for worker in workers:
            share = self._of.get(worker)
            if share is None:
                alone += worker.capacity
            else:
                shared.setdefault(id(share), []).append(worker.capacity)
        for capacities in shared.values():
            alone += min(sum(capacities), self.limit) if len(capacities) > 1 else capacities[0]
        return alone

    def held(self, group: tuple[int, ...]) -> int:
        """Requests the workers on ``group`` hold now (tests, describe)."""
        share = self._groups.get(group)
        return share.busy if share is not None else 0
