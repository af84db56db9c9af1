"""A call's place in a stateful sequence, as clients say it on each protocol, and back.

Shared by the HTTP and gRPC front ends. What a client may send (any of them; a model without
``sequence_batching`` ignores them all):

- HTTP headers (TorchServe's names, configurable with ``sequence_header``): ``NAME`` (the id),
  ``NAME_start`` and ``NAME_end`` (true when ``1``, ``true``, ``yes`` or ``on``);
- OIP request parameters (Triton's sequence extension): ``sequence_id`` (a string, or a non-zero
  integer), ``sequence_start``, ``sequence_end``;
- TorchServe gRPC: ``PredictionsRequest.sequence_id``, and ``NAME_start`` / ``NAME_end`` entries in
  the ``input`` map.

Every response of a sequence carries its id back (the header ``NAME``, the OIP response parameter
``sequence_id``, TorchServe gRPC's ``sequence_id``), and says when the sequence ended (``NAME_end:
true``, ``sequence_end: true``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..types import SequenceOutcome, SequenceRef
from ._headers import http_headers

__all__ = ["flag", "from_headers", "from_parameters", "merged", "response_headers"]

_TRUE = frozenset({"1", "true", "yes", "on"})


def flag(value: Any) -> bool:
    """A start/end flag as clients send it: a bool, a number, or text such as ``true``."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value != 0
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    return isinstance(value, str) and value.strip().lower() in _TRUE


def _id(value: Any) -> str | None:
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return str(value) if value else None  # Triton: 0 means "no sequence"
    text = str(value).strip()
    return text or None


def from_headers(header: Callable[[str], Any], name: str) -> SequenceRef | None:
    """The sequence named by request headers (``header(name)`` gives a value or None)."""
    ident, start, end = header(name), header(name + "_start"), header(name + "_end")
    if ident is None and start is None and end is None:
        return None
    return SequenceRef(id=_id(ident), start=flag(start), end=flag(end))


def from_parameters(parameters: Mapping[str, Any] | None) -> SequenceRef | None:
    """The sequence named by OIP request parameters (Triton's sequence extension)."""
    if not parameters:
        return None
    keys = ("sequence_id", "sequence_start", "sequence_end")
    if not any(key in parameters for key in keys):
        return None
    return SequenceRef(
        id=_id(parameters.get("sequence_id")),
        start=flag(parameters.get("sequence_start")),
        end=flag(parameters.get("sequence_end")),
    )


def merged(first: SequenceRef | None, second: SequenceRef | None) -> SequenceRef | None:
    """One ref from two places a client may have used (headers and parameters, say)."""
    if first is None or second is None:
        return first or second
    return SequenceRef(
        id=first.id or second.id, start=first.start or second.start, end=first.end or second.end
    )


def response_headers(
    outcome: SequenceOutcome | SequenceRef | None, name: str
) -> list[tuple[bytes, bytes]]:
    """The headers that return a sequence's id (and its end, and what the model set)."""
    if outcome is None or outcome.id is None:
        return []
    headers = [(name.encode("latin-1"), outcome.id.encode("latin-1", "replace"))]
    if outcome.ended:
        headers.append(((name + "_end").encode("latin-1"), b"true"))
    headers.extend(http_headers(outcome.headers))
    return headers
