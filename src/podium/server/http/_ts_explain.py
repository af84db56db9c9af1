"""TorchServe's ``/explanations/{model}[/{version}[/{url_path}]]``.

As TorchServe's frontend does, an explanation is the prediction call with the request header
``explain: True`` (``/predictions`` sends ``False``): the handler decides what it means.
TorchServe's ``BaseHandler.handle`` then calls ``explain_handle(data_preprocess, data)`` instead
of ``inference`` and ``postprocess`` (Podium's ``ts.torch_handler.base_handler`` and the default
``handle`` it lends a class with only the steps do the same); a handler with its own ``handle``
reads the header itself (``context.get_request_header(idx, "explain")``). The same methods, body
forms, url_path segments and TorchServe-shaped errors as ``/predictions``. TorchServe's gRPC API
has no explanations (its ``inference.proto`` declares none), so neither has Podium's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._asgi import Send
from ._exchange import Exchange
from ._routing import Api, Route

if TYPE_CHECKING:
    from ._app import HttpApp

__all__ = ["ROUTES", "explanations"]


async def explanations(
    self: HttpApp,
    ex: Exchange,
    send: Send,
    model: str,
    version: str | None = None,
    url_path: str = "",
) -> None:
    """The handler's explanation of the request (``explain: True``)."""
    await self._torchserve(ex, send, model, version, url_path, explain=True)


#: The explanations routes, in ``INFERENCE_ROUTES`` beside ``/predictions`` (the same methods,
#: and names: ``explanations``, ``versionExplanations``, ``versionExplanationsPath``).
ROUTES = [
    Route(("POST", "PUT", "GET"), f"/explanations{tail}", explanations, Api.TORCHSERVE_REST, name)
    for tail, name in (
        ("/{model}", "explanations"),
        ("/{model}/{version}", "versionExplanations"),
        ("/{model}/{version}/{url_path:path}", "versionExplanationsPath"),
    )
]
