"""The HTTP front end: one pure ASGI application for OIP REST, Truss and TorchServe routes.

``_routing`` is the declarative route table (``Route``, ``RouteTable``) that every HTTP
listener dispatches on; ``_app`` holds the inference app and its table (``INFERENCE_ROUTES``).
"""

from ._app import INFERENCE_ROUTES, HttpApp
from ._routing import Api, Route, Router, RouteTable

__all__ = ["INFERENCE_ROUTES", "Api", "HttpApp", "Route", "RouteTable", "Router"]
