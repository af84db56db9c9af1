"""What a gRPC listener allows its clients: connections, streams, pings, the life of a
connection.

grpc core enforces the connection-level limits itself, from the channel arguments
:func:`channel_options` gives the server once, when it is made: nothing runs per call.
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

:class:`GrpcLimits` is a group of the server's settings (``podium.config``): its defaults and
checks are rows of the settings table.

No call holds a thread: relayed calls and ``grpc.aio`` calls alike wait on the event loop, so
calls in flight are bounded by connections × streams alone (``maximum_concurrent_rpcs`` stays
unset).
"""

from __future__ import annotations

from ...config import GrpcLimits

__all__ = ["GrpcLimits", "channel_options"]

#: grpc's integer channel arguments are C ints; milliseconds above this are "unlimited".
_INT_MAX = 2**31 - 1


def channel_options(limits: GrpcLimits) -> list[tuple[str, int]]:
    """The channel arguments of a server with ``limits``."""
    return [
        ("grpc.max_allowed_incoming_connections", limits.max_connections),
        ("grpc.max_concurrent_streams", limits.max_concurrent_streams),
        # Count streams as HTTP/2 does, as the client does. grpc's default counts a stream
        # until the server has freed it, a moment after the client saw it end: a client
        # reusing the slot gets REFUSED_STREAM, which grpc clients report as UNAVAILABLE
        # (on a burst of 300 calls on one channel, two thirds failed).
        ("grpc.http.overload_protection", 0),
        ("grpc.server_handshake_timeout_ms", _ms(limits.handshake_timeout)),
        ("grpc.max_connection_idle_ms", _ms(limits.max_connection_idle or None)),
        ("grpc.max_connection_age_ms", _ms(limits.max_connection_age or None)),
        ("grpc.max_connection_age_grace_ms", _ms(limits.max_connection_age_grace)),
        ("grpc.keepalive_time_ms", _ms(limits.keepalive_time or None)),
        ("grpc.keepalive_timeout_ms", _ms(limits.keepalive_timeout)),
        # Pings without calls are judged by min_ping_interval too; without this, grpc
        # allows a client one per two hours on a connection with no call in flight.
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", _ms(limits.min_ping_interval)),
        ("grpc.http2.max_ping_strikes", limits.max_ping_strikes),
        # Both at once: grpc rejects a random share of the requests between a "soft" and
        # an "absolute" metadata limit; one limit makes the rule the same for every call.
        ("grpc.max_metadata_size", limits.max_metadata_size),
        ("grpc.absolute_max_metadata_size", limits.max_metadata_size),
    ]


def _ms(seconds: float | None) -> int:
    """Milliseconds as grpc takes them; ``None``: unlimited."""
    if seconds is None:
        return _INT_MAX
    return min(_INT_MAX, max(0, round(seconds * 1000)))
