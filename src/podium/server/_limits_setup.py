"""The start-up side of the HTTP connection limits (``server/_limits.py``): whether the installed
uvicorn has what the guarded protocol relies on, the process's open-files limit, and how many
connections each listener may hold within it.
"""

from __future__ import annotations

import builtins
from typing import Any

import uvicorn
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

from ..config import GrpcLimits
from ._cycle import Cycle

__all__ = [
    "LISTENERS",
    "MOST_CONNECTIONS",
    "RESERVED_FDS",
    "check_uvicorn",
    "default_max_connections",
    "raise_open_files_limit",
]

#: File descriptors kept for everything but connections (model files, workers, grpc's own).
RESERVED_FDS = 256

#: Connections per listener where the open-files limit allows: the settings table's default.
MOST_CONNECTIONS = GrpcLimits().max_connections

#: Listeners that share the open-files limit: inference, management and metrics over HTTP,
#: inference and management over gRPC (whose connections --max-connections caps too).
LISTENERS = 5


#: Attribute names the guarded protocol reads or writes, by the uvicorn function that sets them.
_NEEDED: tuple[tuple[Any, frozenset[str]], ...] = (
    (
        HttpToolsProtocol.__init__,
        frozenset(
            {"parser", "cycle", "scope", "headers", "transport", "flow", "loop", "server_state"}
            | {"timeout_keep_alive_task", "timeout_keep_alive", "client", "pipeline"}
            # what the cycle is made of (_limits.py's _start_cycle)
            | {"app", "root_path", "limit_concurrency", "connections", "tasks", "logger"}
            | {"access_logger", "access_log", "expect_100_continue"}
        ),
    ),
    (HttpToolsProtocol.on_message_begin, frozenset({"url", "headers", "scope"})),
    (
        RequestResponseCycle.__init__,
        frozenset(
            {"more_body", "body", "response_started", "response_complete", "disconnected"}
            | {"message_event", "waiting_for_100_continue", "transport"}
            # what the cycle's response head reads and sets (_cycle.py)
            | {"scope", "flow", "access_log", "access_logger", "default_headers", "keep_alive"}
            | {"chunked_encoding", "expected_content_length"}
        ),
    ),
    (FlowControl.__init__, frozenset({"read_paused"})),
    (ServerState.__init__, frozenset({"total_requests", "default_headers"})),
)
_METHODS = (
    "connection_made",
    "connection_lost",
    "data_received",
    "on_message_begin",
    "on_url",
    "on_header",
    "on_headers_complete",
    "on_response_complete",
    "timeout_keep_alive_handler",
    "shutdown",
    "_unset_keepalive_if_required",
    "_start_asgi_task",
    "_should_upgrade",
)
_TESTED = "0.54"


def check_uvicorn() -> None:
    """Raise RuntimeError if uvicorn's httptools protocol lacks what the limits rely on."""
    missing = [m for m in _METHODS if not callable(getattr(HttpToolsProtocol, m, None))]
    for function, names in _NEEDED:
        code = getattr(function, "__code__", None)
        found = set(code.co_names) if code is not None else set()
        missing += sorted(f"{function.__qualname__}: {n}" for n in names - found)
    if not hasattr(FlowControl, "resume_reading"):
        missing.append("FlowControl.resume_reading")
    # _cycle.Cycle makes its state itself: every attribute uvicorn's cycle starts with
    cycle_state = set(RequestResponseCycle.__init__.__code__.co_names) - set(dir(builtins))
    made = set(Cycle.__init__.__code__.co_names) | set(vars(Cycle))
    missing += sorted(f"RequestResponseCycle.{n}" for n in cycle_state - made)
    if missing:
        raise RuntimeError(
            f"uvicorn {uvicorn.__version__} lacks what Podium's connection limits rely on "
            f"({', '.join(missing)}); install the uvicorn version Podium was tested with "
            f"({_TESTED}.x)"
        )


def raise_open_files_limit() -> tuple[int, int] | None:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit: (before, after), or None
    where the platform has no such limit."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    unlimited = resource.RLIM_INFINITY
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == unlimited or soft == hard:
        return soft, soft
    # An unlimited hard limit (macOS) cannot be the soft one: try a large value, then OPEN_MAX.
    for target in [hard] if hard != unlimited else [1 << 20, 10240]:
        if target <= soft:
            break
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            continue
        break
    return soft, resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def default_max_connections(open_files: int | None) -> int:
    """MOST_CONNECTIONS per listener, or fewer where the open-files limit cannot hold that many
    on every listener (HTTP and gRPC) plus RESERVED_FDS for the rest of the server."""
    if open_files is None or open_files < 0:  # unknown or unlimited
        return MOST_CONNECTIONS
    return max(16, min(MOST_CONNECTIONS, (open_files - RESERVED_FDS) // LISTENERS))
