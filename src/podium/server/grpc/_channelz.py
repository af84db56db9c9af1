"""Open connections of a gRPC server, from grpc's channelz (read when metrics are scraped).

grpcio keeps channelz (its introspection of servers, channels and sockets) in its C core and
reads it through ``grpc._cython.cygrpc``'s ``channelz_*`` functions, the ones the
``grpcio-channelz`` service calls. A server is known by the channelz id it gets when it is
constructed (:func:`server_ids` before and after tells which); its open connections are the
sockets channelz lists for it. Where this grpcio lacks these functions, every answer is None and
the metric is left out: nothing per call depends on it.
"""

from __future__ import annotations

import json
import logging
from typing import Any

__all__ = ["open_connections", "server_ids"]

logger = logging.getLogger("podium.grpc")

_PAGE = 1000


def _cygrpc() -> Any:
    try:
        from grpc._cython import cygrpc
    except ImportError:  # pragma: no cover - grpcio always has it today
        return None
    if not hasattr(cygrpc, "channelz_get_servers"):
        return None
    return cygrpc


def server_ids() -> set[int] | None:
    """The channelz ids of every gRPC server of this process; None if channelz does not
    answer."""
    cygrpc = _cygrpc()
    if cygrpc is None:
        return None
    found: set[int] = set()
    start = 0
    try:
        while True:
            page = json.loads(cygrpc.channelz_get_servers(start))
            servers = page.get("server", [])
            for server in servers:
                found.add(int(server["ref"]["serverId"]))
            if page.get("end", True) or not servers:
                return found
            start = max(found) + 1
    except Exception as exc:
        logger.debug("channelz does not answer: %s", exc)
        return None


def open_connections(ids: set[int]) -> int | None:
    """Connections open on the servers with these channelz ids; None if channelz does not
    answer."""
    cygrpc = _cygrpc()
    if cygrpc is None:
        return None
    count = 0
    try:
        for server in ids:
            start = 0
            while True:
                page = json.loads(cygrpc.channelz_get_server_sockets(server, start, _PAGE))
                sockets = page.get("socketRef", [])
                count += len(sockets)
                if page.get("end", True) or not sockets:
                    break
                start = max(int(s["socketId"]) for s in sockets) + 1
    except Exception as exc:
        logger.debug("channelz does not answer: %s", exc)
        return None
    return count
