"""The HTTP front end: one pure ASGI application for OIP REST, Truss and TorchServe routes."""

from ._app import HttpApp

__all__ = ["HttpApp"]
