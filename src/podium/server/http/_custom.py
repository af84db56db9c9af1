"""A model's own HTTP routes (an MLServer runtime's ``@custom_handler`` endpoints), on the
inference listener, as MLServer's REST app serves them.

They are not in the route table: which exist depends on the models loaded (MLServer adds a
route when a model loads and removes it on unload). The app offers every request that no route
of the table matches to :func:`serve` first, so a handler can never shadow a Podium route (as
in MLServer, where its own routes come first too).

The handler's value is the response: a Starlette ``Response`` is sent as it is; anything else as
JSON (status 200), pydantic models as their data. An error it raises keeps its status
(``MLServerError.status_code``) with MLServer's body, ``{"error": "..."}``.
"""

from __future__ import annotations

from typing import Any

from ...dataplane import DataPlane
from ...types import Call, Returned, WireProtocol, is_response
from .._asgi import Scope, Send
from ._exchange import Exchange
from ._responses import send_json

__all__ = ["serve"]


async def serve(dataplane: DataPlane, ex: Exchange, scope: Scope, send: Send) -> bool:
    """Answer the request with a model's handler route, if one serves its path: True when
    answered; False when no model has a route there (``MethodNotAllowed`` when one has, for
    other methods)."""
    found = dataplane.handler_route(scope["method"], scope["path"])
    if found is None:
        return False
    mv, route, params = found
    ex.check_length()
    request = ex.request()
    call = Call(mv.name, mv.version or None, WireProtocol.OIP_REST, params, request)
    answer = dataplane.endpoint(call, mv, route.name)
    value: Any = None
    try:
        async for item in answer:
            value = item.value if isinstance(item, Returned) else item
    finally:
        await answer.aclose()
    if is_response(value):
        await value(scope, ex.app_receive, send)
    else:
        await send_json(send, 200, value)
    return True
