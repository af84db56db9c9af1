"""Sticky routing of stateful sequences: Serve's request-router API (``request_router_config``).

A model with ``sequence_batching`` holds each sequence's state in one replica, so every request of
a sequence must reach that replica. :class:`SequenceRouter` pins a sequence's id to a replica when
its first request is routed (to the replica holding the fewest sequences) and routes every later
request with that id there, waiting as any request does while that replica is at its
``max_ongoing_requests``. The ingress gives every call a sequence id before routing it (one it
makes, with the start flag, when the client sent none), so the pin is made before the first
request runs and a second request of the sequence, sent before the first is answered, follows it.

When the pinned replica is gone (it died, Ray killed it, autoscaling stopped it), the sequence's
state is gone with it: a request that continues the sequence fails with ``SequenceClosed`` (410),
as a request does on a single server whose worker was lost, and is never run elsewhere with an
empty state. A request with the start flag begins the sequence anew on a replica that runs.

Why a router and not model multiplexing keyed by sequence id: multiplexing routes to a replica
that reports the id *loaded*, learned from the controller a moment later, and otherwise "loads"
it on the replica with the fewest; a sequence's second request can then land on another replica,
and a lost replica's sequences would silently start again elsewhere. The router decides at once,
in the ingress's process, and knows when a pinned replica is gone. Its limit: the pins live in
the process that routes (the ingress's), so the application runs one ingress replica when a model
has sequences (docs/ray.md).

The pins are kept per deployment for the whole process (:func:`pins_for`), since Serve may make
a router per handle.
"""

from __future__ import annotations

import random
from collections import Counter, OrderedDict
from typing import Any

from ray.serve.request_router import PendingRequest, RequestRouter, RunningReplica

from ..errors import SequenceClosed
from ..types import Call

__all__ = ["Pins", "SequenceRouter", "pins_for"]


class Pins:
    """Sequence id → the replica (its unique id) that holds the sequence, least recently used
    first; at most ``limit`` (the oldest go: a sequence that old has long ended or expired in
    its replica, whose own memory of ended ids then answers for it as long as it can); and how
    many are pinned to each replica (:meth:`count`)."""

    __slots__ = ("_counts", "_pins", "limit")

    def __init__(self, limit: int = 100_000) -> None:
        self._pins: OrderedDict[str, str] = OrderedDict()
        self._counts: Counter[str] = Counter()
        self.limit = limit

    def get(self, sequence_id: str) -> str | None:
        replica = self._pins.get(sequence_id)
        if replica is not None:
            self._pins.move_to_end(sequence_id)
        return replica

    def pin(self, sequence_id: str, replica: str) -> None:
        previous = self._pins.get(sequence_id)
        if previous is not None:
            self._counts[previous] -= 1
        self._pins[sequence_id] = replica
        self._counts[replica] += 1
        self._pins.move_to_end(sequence_id)
        while len(self._pins) > self.limit:
            _, gone = self._pins.popitem(last=False)
            self._counts[gone] -= 1

    def count(self, replica: str) -> int:
        """How many sequences are pinned to ``replica``."""
        return self._counts[replica]

    def __len__(self) -> int:
        return len(self._pins)


_PINS: dict[tuple[str, str], Pins] = {}


def pins_for(app: str, deployment: str) -> Pins:
    """The pins of one deployment, shared by every router of this process."""
    pins = _PINS.get((app, deployment))
    if pins is None:
        pins = _PINS[(app, deployment)] = Pins()
    return pins


def _sequence_of(request: PendingRequest | None) -> tuple[str, bool] | None:
    """The sequence id and start flag of a call (the ingress names one on every call to a
    sequence model); None for other methods (``describe``)."""
    if request is None or not request.args:
        return None
    call = request.args[0]
    if not isinstance(call, Call) or call.sequence is None or call.sequence.id is None:
        return None
    return call.sequence.id, call.sequence.start


class SequenceRouter(RequestRouter):
    """Routes each request of a sequence to the replica that holds it (see the module)."""

    def initialize_state(self, **kwargs: Any) -> None:
        """``deployment`` and ``label`` (how errors name the model) come from
        ``request_router_kwargs``."""
        self._label = str(kwargs.get("label", "the model"))
        self._pins = pins_for(self.app_name, str(kwargs.get("deployment", "")))

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        sequence = _sequence_of(pending_request)
        if sequence is None:
            return [candidate_replicas]
        assert pending_request is not None
        sequence_id, start = sequence
        pinned = self._pins.get(sequence_id)
        if pinned is not None:
            for replica in candidate_replicas:
                if replica.replica_id.unique_id == pinned:
                    return [[replica]]
            if not start:
                # Its state went with its replica: fail it, as a lost worker's sequence fails.
                # (Routing ends once a choice is offered for a request whose future is done.)
                if not pending_request.future.done():
                    pending_request.future.set_exception(self._lost(sequence_id, pinned))
                return [candidate_replicas[:1]]
        chosen = self._fewest_pinned(candidate_replicas)
        self._pins.pin(sequence_id, chosen.replica_id.unique_id)
        return [[chosen]]

    def _fewest_pinned(self, replicas: list[RunningReplica]) -> RunningReplica:
        """The replica holding the fewest sequences pinned here, ties broken at random: new
        sequences spread evenly, whatever their requests' timing. (Not the queue lengths Serve
        last probed: this router never probes, so they go stale and would send every new
        sequence to the same replica.)"""
        counts = [self._pins.count(r.replica_id.unique_id) for r in replicas]
        best = min(counts)
        return random.choice([r for r, n in zip(replicas, counts, strict=True) if n == best])

    def _lost(self, sequence_id: str, replica: str) -> SequenceClosed:
        return SequenceClosed(
            f"{self._label}: sequence '{sequence_id}' is closed: its state was lost with "
            f"replica {replica}, which is no longer running; a request without the start flag "
            "does not begin it again (send the start flag to begin a new sequence with this "
            "id, or send no id to get a new one)"
        )
