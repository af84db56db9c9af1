"""``mlserver.handlers.custom``: a runtime's own REST endpoints (``@custom_handler``).

The decorator only marks the method (an attribute, as MLServer's does); Podium's HTTP inference
listener serves every marked method of a loaded runtime at its ``rest_path`` (docs/mlserver.md,
"Custom handlers").
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

__all__ = ["CustomHandler", "custom_handler", "get_custom_handlers", "register_custom_handler"]

#: The attribute that marks a method as a custom handler (MLServer's name, so that a runtime
#: marked by MLServer's own decorator is found too).
HANDLER_ATTRIBUTE = "__custom_handler__"


class CustomHandler(BaseModel):
    """Where a handler is served: its path, and the one HTTP method it answers."""

    rest_path: str
    rest_method: str = "POST"


def custom_handler(
    rest_path: str, rest_method: str = "POST"
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Serve the decorated runtime method at ``rest_path`` for ``rest_method`` requests."""

    def mark(method: Callable[..., Any]) -> Callable[..., Any]:
        register_custom_handler(CustomHandler(rest_path=rest_path, rest_method=rest_method), method)
        return method

    return mark


def register_custom_handler(handler: CustomHandler, method: Callable[..., Any]) -> None:
    setattr(method, HANDLER_ATTRIBUTE, handler)


def get_custom_handlers(model: Any) -> list[tuple[CustomHandler, Callable[..., Any]]]:
    """Every marked method of ``model`` (bound), with where it is served, in name order."""
    found = []
    for _, member in inspect.getmembers(model):
        handler = getattr(member, HANDLER_ATTRIBUTE, None)
        if handler is not None:
            found.append((handler, member))
    return found
