"""What crosses between the ingress and a model's replicas, besides the :class:`~podium.types.Call`
(which goes as it is, its raw request as a snapshot) and the :class:`~podium.types.Answer` (which
comes back as it is).

A replica answers a Podium error with a :class:`Failure` rather than raising it: the ingress
raises the very error again, class and message, so that a client gets the status and body a
single server gives (an exception raised in a replica would reach the ingress wrapped in Ray's
own, with the replica's traceback in its text). A stream's items come as :class:`Item`s, with
where the call stands in its stateful sequence whenever that changes, and :class:`Outcome` once
more after the last item (the sequence may end only then).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import PodiumError
from ..types import SequenceOutcome

__all__ = ["Failure", "Item", "Outcome"]


@dataclass(frozen=True, slots=True)
class Failure:
    """The call failed in the replica with ``error`` (raised again by the ingress)."""

    error: PodiumError


@dataclass(frozen=True, slots=True)
class Item:
    """One item of a stream, and its sequence's outcome when it changed (else None)."""

    value: Any
    sequence: SequenceOutcome | None = None


@dataclass(frozen=True, slots=True)
class Outcome:
    """Where the call left its sequence once its stream ended."""

    sequence: SequenceOutcome
