"""The HTTP front end: one pure ASGI application for OIP REST, Truss and TorchServe routes.

``_routing`` is the declarative route table (``Route``, ``RouteTable``) that every HTTP
listener dispatches on; ``_app`` holds the inference app and its table (``INFERENCE_ROUTES``);
``_access`` is the middleware that gives every request of a listener its id, access line and
span (``AccessMiddleware``); ``_web`` the wrappers MLServer's ``cors_settings``, ``gzip_enabled``
and ``root_path`` ask for (``with_web``, ``RootPath``).
"""

from ._access import AccessMiddleware
from ._app import INFERENCE_ROUTES, HttpApp
from ._routing import Api, Route, Router, RouteTable
from ._web import RootPath, with_web

__all__ = [
    "INFERENCE_ROUTES",
    "AccessMiddleware",
    "Api",
    "HttpApp",
    "RootPath",
    "Route",
    "RouteTable",
    "Router",
    "with_web",
]
