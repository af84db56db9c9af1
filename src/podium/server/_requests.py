"""Request objects for process workers: a snapshot taken in the server, rebuilt in the worker.

A model that takes the raw request (``request: starlette.requests.Request``) and runs in a worker
process gets a real ``starlette.requests.Request`` there, rebuilt from a snapshot of the one the
front end made: method, URL (scheme, server, path, query string), headers, client, HTTP version,
and the body (read here, in the server, once). Its ``receive`` answers ``http.disconnect`` as soon
as the server tells the worker that the real client left, so ``await request.is_disconnected()``
turns true there as it does in the server. What a worker cannot have: the ASGI ``send`` (a model
answers by returning, as everywhere), ``request.app`` and ``request.state`` (server objects).

``runtime/`` never imports this module: ``_runner.py`` hands :class:`RequestSnapshots` down as the
:class:`podium.runtime.workers.RequestCodec`, and :func:`rebuild` reaches the worker process by
reference (pickled by its module and name), which imports it there.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import sched

if TYPE_CHECKING:
    from ..dataplane import DataPlane

__all__ = ["RequestSnapshots", "Snapshot", "model_plane", "rebuild"]

#: What crosses to the worker: the scope's request keys, and the body.
Snapshot = tuple[dict[str, Any], bytes]

#: The scope keys that describe the request (everything else belongs to the server).
_KEYS = (
    "type",
    "asgi",
    "http_version",
    "method",
    "scheme",
    "server",
    "client",
    "root_path",
    "path",
    "raw_path",
    "query_string",
    "headers",
)

_DISCONNECT = {"type": "http.disconnect"}


def rebuild(snapshot: Snapshot, gone: Callable[[], Awaitable[Any]]) -> Any:
    """The worker's ``starlette.requests.Request``: the snapshot's scope and body; its
    ``receive`` returns ``http.disconnect`` once ``await gone()`` returns (the client left)."""
    from starlette.requests import Request

    async def receive() -> dict[str, Any]:
        await gone()
        return _DISCONNECT

    scope, body = snapshot
    request = Request(scope, receive)
    request._body = body  # starlette's cache: body(), json() and stream() use it
    return request


class RequestSnapshots:
    """The :class:`~podium.runtime.workers.RequestCodec` for starlette requests."""

    rebuild = staticmethod(rebuild)

    async def snapshot(self, request: Any) -> Snapshot:
        """A picklable copy of ``request``: its scope's request keys and its body."""
        scope = request.scope
        copied = {key: scope[key] for key in _KEYS if key in scope}
        copied["headers"] = [(bytes(k), bytes(v)) for k, v in scope.get("headers", ())]
        if "server" in copied and copied["server"] is not None:
            copied["server"] = tuple(copied["server"])
        if "client" in copied and copied["client"] is not None:
            copied["client"] = tuple(copied["client"])
        grpc = scope.get("extensions", {}).get("grpc")
        if grpc is not None:
            copied["extensions"] = {"grpc": dict(grpc)}
        return copied, await request.body()


def model_plane(
    threads: int, secrets_dir: Path | str | None, **options: Any
) -> tuple[DataPlane, ThreadPoolExecutor]:
    """A data plane as ``podium serve`` (``_runner.py``) and each Ray Serve replica
    (podium.ray) build it: the models' sync code on a pool of ``threads`` threads (returned too:
    its owner shuts it down after closing the plane), their secrets from ``secrets_dir``,
    request objects reaching worker processes as :class:`RequestSnapshots`; ``options``: the
    rest of ``DataPlane``'s arguments."""
    # Imported here: a worker process imports this module to rebuild requests, and only that.
    from ..config import Secrets
    from ..dataplane import DataPlane

    executor = ThreadPoolExecutor(
        threads, thread_name_prefix="podium-model", initializer=sched.batch_this_thread
    )
    secrets = Secrets(Path(secrets_dir) if secrets_dir else None)
    plane = DataPlane(secrets=secrets, executor=executor, codec=RequestSnapshots(), **options)
    return plane, executor
