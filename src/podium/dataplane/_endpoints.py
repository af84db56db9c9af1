"""What a model offers besides predict, where its capabilities say so (a truss's): its health,
its other named methods (Truss's OpenAI-style routes, an MLServer runtime's custom handlers),
its WebSockets.

They run on the version's instance itself and outside ``predict_concurrency``, as Truss runs
them; a call through them is in flight (the shutdown drains and cuts it) and counted by
protocol and outcome like any other.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator
from typing import Any, cast

from ..errors import MethodNotAllowed, NotFound, UnsupportedRepresentation
from ..runtime import ModelVersion, WorkerKind
from ..types import Call, HandlerRoute, ModelEndpoints, ModelState
from ._flight import Counted, InFlight

__all__ = ["endpoint_items", "handler_route", "healthy", "serve_websocket"]

logger = logging.getLogger("podium.dataplane")


def _offers(mv: ModelVersion, what: str) -> ModelEndpoints:
    """The instance, which must offer ``what`` (a process worker's offers nothing of this)."""
    if mv.pool is not None and mv.pool.kind is not WorkerKind.THREAD:
        raise UnsupportedRepresentation(
            f"model '{mv.name}': {what} runs on thread workers (this model runs in "
            f"{mv.pool.kind.value} workers)"
        )
    return cast(ModelEndpoints, mv.instance)


async def healthy(mv: ModelVersion) -> bool:
    """What a model that checks its own health says (an error in the check counts as not
    healthy, and is logged); True for one that does not check."""
    if not mv.instance.capabilities.health_check:
        return True
    try:
        return bool(await _offers(mv, "is_healthy").is_healthy())
    except Exception:
        logger.exception("model '%s': is_healthy raised; the model counts as not healthy", mv.name)
        return False


async def endpoint_items(
    flight: InFlight, mv: ModelVersion, call: Call, name: str
) -> AsyncGenerator[Any, None]:
    """The items of the model's method ``name`` called with the call's payload: one
    :class:`~podium.types.Returned`, or the items of the generator it returned."""
    caps = mv.instance.capabilities
    if name not in caps.endpoints and not any(r.name == name for r in caps.handler_routes):
        raise NotFound(f"model '{mv.name}' defines no method '{name}'")
    instance = _offers(mv, name)
    with Counted(flight, call, mv.stats, stream=False):
        async with contextlib.aclosing(
            instance.endpoint(name, call.payload, call.request)
        ) as items:
            async for item in items:
                yield item


async def serve_websocket(flight: InFlight, mv: ModelVersion, call: Call, websocket: Any) -> None:
    """Hand ``websocket`` to the model for as long as it keeps it."""
    if not mv.instance.capabilities.websocket:
        raise NotFound(f"model '{mv.name}' serves no WebSocket")
    instance = _offers(mv, "websocket")
    task = flight.enter(call)
    try:
        await instance.websocket(websocket)
    finally:
        if task is not None:
            flight.leave(task)


def handler_route(
    versions: list[ModelVersion], method: str, path: str
) -> tuple[ModelVersion, HandlerRoute, dict[str, str]] | None:
    """The ready version whose handler route serves ``method`` ``path``, the route and the
    path's parameters (the first such, in the order of ``versions``); None when no route's path
    matches; ``MethodNotAllowed`` when some match but not for ``method``."""
    allowed: list[str] = []
    for mv in versions:
        if mv.state is not ModelState.READY:
            continue
        for route in mv.instance.capabilities.handler_routes:
            params = _match(route.path, path)
            if params is None:
                continue
            if route.method == method or (method == "HEAD" and route.method == "GET"):
                return mv, route, params
            allowed.append(route.method)
    if allowed:
        raise MethodNotAllowed(
            f"{path} answers {', '.join(sorted(set(allowed)))}, not {method}",
            tuple(sorted(set(allowed))),
        )
    return None


def _match(template: str, path: str) -> dict[str, str] | None:
    """``path``'s values for ``template``'s ``{name}`` segments (``{name:path}`` takes the
    rest), or None when it does not match (one trailing ``/`` is not significant)."""
    want = template.rstrip("/").split("/")
    got = path.rstrip("/").split("/")
    params: dict[str, str] = {}
    for i, segment in enumerate(want):
        if segment.startswith("{") and segment.endswith("}"):
            name, _, kind = segment[1:-1].partition(":")
            if kind == "path":
                if i >= len(got):
                    return None
                params[name] = "/".join(got[i:])
                return params
            if i >= len(got) or not got[i]:
                return None
            params[name] = got[i]
        elif i >= len(got) or got[i] != segment:
            return None
    return params if len(want) == len(got) else None
