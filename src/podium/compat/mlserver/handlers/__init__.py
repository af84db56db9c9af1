"""``mlserver.handlers``: what a runtime imports from MLServer's handlers (its custom REST
endpoints); MLServer's ``DataPlane`` and ``ModelRepositoryHandlers`` are its server's own, which
Podium's data plane replaces (docs/mlserver.md, "Not provided")."""

from .custom import custom_handler, get_custom_handlers

__all__ = ["custom_handler", "get_custom_handlers"]
