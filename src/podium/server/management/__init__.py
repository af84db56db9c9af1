"""The management API (TorchServe's): register, list, describe, scale, set-default, unregister.

``_core`` puts the data plane's model repository behind it (shared by REST and gRPC: TorchServe's
answers, rendered from the repository's typed ones); ``_app`` is the REST front end (pure ASGI);
``_params`` validates parameters for both; ``_urls`` decides where a ``url`` points (local path,
model store, or an allowed remote URL that is downloaded); ``_openapi`` describes the REST API
from its route table (``MANAGEMENT_ROUTES``). The gRPC service is ``server/grpc/_management.py``.
"""

from ._app import MANAGEMENT_ROUTES, ManagementApp, render_unauthenticated
from ._core import Management, Outcome
from ._params import Registration, Scaling, page
from ._urls import UrlPolicy

__all__ = [
    "MANAGEMENT_ROUTES",
    "Management",
    "ManagementApp",
    "Outcome",
    "Registration",
    "Scaling",
    "UrlPolicy",
    "page",
    "render_unauthenticated",
]
