"""What a gRPC listener allows its clients: connections, streams, pings, the life of a
connection.

grpc core enforces the connection-level limits itself, from the channel arguments
:meth:`GrpcLimits.options` gives the server once, when it is made: nothing runs per call.
docs/security.md ("gRPC limits") gives each value's reason and compares it with Triton's and
grpc-go's and grpc-java's defaults.

- At most ``max_connections`` connections at once (``grpc.max_allowed_incoming_connections``);
  grpc closes one more as soon as it is accepted, and the client retries with its backoff.
- A connection must send the HTTP/2 preface and its SETTINGS within ``handshake_timeout``.
- At most ``max_concurrent_streams`` calls at once on one connection: the number is announced in
  the server's HTTP/2 SETTINGS, and a client keeps further calls waiting until one ends (HTTP/2's
  rule; grpc clients do so). Calls in flight on a listener are bounded by connections × streams.
- Keepalive enforcement: a client may ping at most every ``min_ping_interval`` while no data
  flows (with or without calls in flight); after ``max_ping_strikes`` pings sooner than that, the
  server sends ``GOAWAY`` (``ENHANCE_YOUR_CALM``, ``too_many_pings``) and closes the connection.
- The server pings a connection with nothing to read for ``keepalive_time`` and closes it if the
  answer takes over ``keepalive_timeout``: a vanished peer's calls are cancelled (their models'
  work too), and its connection no longer counts.
- A connection without calls for ``max_connection_idle`` is closed (``GOAWAY`` first), one older
  than ``max_connection_age`` (±10 %, grpc's jitter) is told to go (``GOAWAY``: its client makes
  new calls on a new connection) and closed once its calls have ended, or after
  ``max_connection_age_grace`` (``None``: whenever they end).
- Request metadata (headers) larger than ``max_metadata_size`` ends the call.

No call holds a thread: relayed calls and ``grpc.aio`` calls alike wait on the event loop, so
calls in flight are bounded by connections × streams alone (``maximum_concurrent_rpcs`` stays
unset).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["GrpcLimits"]

#: grpc's integer channel arguments are C ints; milliseconds above this are "unlimited".
_INT_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class GrpcLimits:
    """One gRPC listener's limits (see the module docstring); times in seconds (grpc counts
    whole milliseconds, up to about 24 days: longer is unlimited), 0 meaning never where the
    field says so."""

    max_connections: int = 1000
    max_concurrent_streams: int = 100  #: per connection
    handshake_timeout: float = 10.0
    max_connection_idle: float = 300.0  #: 0: never closed for idleness
    max_connection_age: float = 1800.0  #: 0: no age limit
    max_connection_age_grace: float | None = None  #: None: calls in flight are never cut
    keepalive_time: float = 60.0  #: 0: the server never pings
    keepalive_timeout: float = 20.0
    min_ping_interval: float = 5.0  #: 0: a client may ping as often as it likes
    max_ping_strikes: int = 2  #: 0: never GOAWAY for pings
    max_metadata_size: int = 16 * 1024

    def __post_init__(self) -> None:
        for name in ("max_connections", "max_concurrent_streams", "max_metadata_size"):
            _check_int(name, getattr(self, name), least=1)
        _check_int("max_ping_strikes", self.max_ping_strikes, least=0)
        for name in (
            "handshake_timeout",
            "max_connection_idle",
            "max_connection_age",
            "max_connection_age_grace",
            "keepalive_time",
            "keepalive_timeout",
            "min_ping_interval",
        ):
            value = getattr(self, name)
            if value is None and name == "max_connection_age_grace":
                continue
            least = 0.001 if name in ("handshake_timeout", "keepalive_timeout") else 0.0
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not least <= value < math.inf
            ):
                raise ValueError(
                    f"grpc limit {name} must be a number of seconds >= {least:g}, got {value!r}"
                )

    def options(self) -> list[tuple[str, int]]:
        """The channel arguments of a server with these limits."""
        return [
            ("grpc.max_allowed_incoming_connections", self.max_connections),
            ("grpc.max_concurrent_streams", self.max_concurrent_streams),
            # Count streams as HTTP/2 does, as the client does. grpc's default counts a stream
            # until the server has freed it, a moment after the client saw it end: a client
            # reusing the slot gets REFUSED_STREAM, which grpc clients report as UNAVAILABLE
            # (on a burst of 300 calls on one channel, two thirds failed).
            ("grpc.http.overload_protection", 0),
            ("grpc.server_handshake_timeout_ms", _ms(self.handshake_timeout)),
            ("grpc.max_connection_idle_ms", _ms(self.max_connection_idle or None)),
            ("grpc.max_connection_age_ms", _ms(self.max_connection_age or None)),
            ("grpc.max_connection_age_grace_ms", _ms(self.max_connection_age_grace)),
            ("grpc.keepalive_time_ms", _ms(self.keepalive_time or None)),
            ("grpc.keepalive_timeout_ms", _ms(self.keepalive_timeout)),
            # Pings without calls are judged by min_ping_interval too; without this, grpc
            # allows a client one per two hours on a connection with no call in flight.
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_ping_interval_without_data_ms", _ms(self.min_ping_interval)),
            ("grpc.http2.max_ping_strikes", self.max_ping_strikes),
            # Both at once: grpc rejects a random share of the requests between a "soft" and
            # an "absolute" metadata limit; one limit makes the rule the same for every call.
            ("grpc.max_metadata_size", self.max_metadata_size),
            ("grpc.absolute_max_metadata_size", self.max_metadata_size),
        ]


def _ms(seconds: float | None) -> int:
    """Milliseconds as grpc takes them; ``None``: unlimited."""
    if seconds is None:
        return _INT_MAX
    return min(_INT_MAX, max(0, round(seconds * 1000)))


def _check_int(name: str, value: Any, *, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= _INT_MAX:
        raise ValueError(f"grpc limit {name} must be an integer from {least} to {_INT_MAX}")
