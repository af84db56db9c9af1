"""A call's place in a stateful sequence, as clients say it on each protocol, and back.

Shared by the HTTP and gRPC front ends. What a client may send (any of them; a model without
``sequence_batching`` ignores them all):

- HTTP headers (TorchServe's names, configurable with ``sequence_header``): ``NAME`` (the id),
  and the flags ``NAME_start`` / ``NAME_end`` or TorchServe's own ``ts_request_sequence_start`` /
  ``ts_request_sequence_end`` (true when ``1``, ``true``, ``yes`` or ``on``). An id header that an
  HTTP client joined from several lines (``"id, id"``, as clients join repeated headers) is that
  id when every part is the same, and a 400 when they differ;
- OIP request parameters (Triton's sequence extension): ``sequence_id`` (a string, or a non-zero
  integer), ``sequence_start``, ``sequence_end``;
- TorchServe gRPC: ``PredictionsRequest.sequence_id``, and the same flags as entries of the
  ``input`` map.

Every response of a sequence carries its id back (the header ``NAME``, the OIP response parameter
``sequence_id``, TorchServe gRPC's ``sequence_id``), and says when the sequence ended (``NAME_end:
true``, ``sequence_end: true``). A header the model set replaces Podium's own of the same name, so
that each goes out once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..errors import InvalidInput
from ..types import SequenceOutcome, SequenceRef
from ._headers import http_headers

__all__ = [
    "TS_END",
    "TS_START",
    "flag",
    "flag_names",
    "from_headers",
    "from_parameters",
    "merged",
    "response_headers",
    "without",
]

_TRUE = frozenset({"1", "true", "yes", "on"})

#: TorchServe's own names of a client's start and end flags (its ``ts_header_key_sequence_*``
#: defaults), taken besides ``NAME_start`` / ``NAME_end``.
TS_START = "ts_request_sequence_start"
TS_END = "ts_request_sequence_end"


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


def flag_names(name: str) -> tuple[tuple[str, str], tuple[str, str]]:
    """The names a client may give the start flag, and the end flag, for id header ``name``."""
    return (name + "_start", TS_START), (name + "_end", TS_END)


def from_headers(header: Callable[[str], Any], name: str) -> SequenceRef | None:
    """The sequence named by request headers (``header(name)`` gives a value or None)."""
    ident = header(name)
    (start_own, start_ts), (end_own, end_ts) = flag_names(name)
    start, end = header(start_own), header(end_own)
    start_alt, end_alt = header(start_ts), header(end_ts)
    if ident is None and start is None and end is None and start_alt is None and end_alt is None:
        return None
    return SequenceRef(
        id=_header_id(ident, name),
        start=flag(start) or flag(start_alt),
        end=flag(end) or flag(end_alt),
    )


def _header_id(value: Any, name: str) -> str | None:
    """The id in header ``name``; a value an HTTP client joined from repeated lines (``"a, a"``:
    clients join a response's two lines so, and send the result back) is its one id."""
    ident = _id(value)
    if ident is None or "," not in ident:
        return ident
    parts = {part.strip() for part in ident.split(",")} - {""}
    if len(parts) == 1:
        return parts.pop()
    raise InvalidInput(
        f"the {name} header names {len(parts)} different sequences ({ident!r}); send one id "
        "(a sequence id cannot contain a comma)"
    )


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
    headers = [(name.lower().encode("latin-1"), outcome.id.encode("latin-1", "replace"))]
    if outcome.ended:
        headers.append(((name + "_end").lower().encode("latin-1"), b"true"))
    if outcome.headers:
        by_model = http_headers(outcome.headers)
        return [*without(headers, {k for k, _ in by_model}), *by_model]
    return headers


def without(
    headers: list[tuple[bytes, bytes]], names: set[bytes] | frozenset[bytes]
) -> list[tuple[bytes, bytes]]:
    """``headers`` less those named in ``names`` (lower-case, as ASGI carries them)."""
    return [h for h in headers if h[0].lower() not in names] if names else headers
